"""The typer application: the root options, and the command modules' commands registered on it."""

from __future__ import annotations

import inspect

import typer
from rich.markup import escape
from typer.core import TyperArgument, TyperOption
from typer.models import ParameterInfo

from headlab.cli.commands import (
    circuits_command,
    compare_command,
    expressivity_command,
    formation_command,
    grad_command,
    model_ablate_command,
    model_collapse_command,
    model_families_command,
    model_generate_command,
    model_heads_command,
    model_importance_command,
    model_kv_budget_command,
    model_prune_command,
    model_roles_command,
    params_command,
    redundancy_command,
    report_command,
    specialisation_command,
    sweep_command,
    sweep_plot_command,
    sweep_summary_command,
    why_attends_command,
)

app = typer.Typer(
    name="headlab",
    help="Exact, fast and inspectable multi-head attention, and measured answers about heads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
)

# typer's rich help shows a flag as ``--json <bool>`` (its plain help does not): no type for flags.
_display_type = TyperOption.display_type_rich
TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _display_type(self, ctx)


def _usage_name(argument: TyperArgument) -> str:
    """An argument in the usage line as click writes it, ``PROMPT`` (``[PROMPT]`` when optional),
    not typer's ``{prompt}``, which reads as a template placeholder."""
    name = (argument.metavar or argument.name or "").upper()
    name = name if argument.required else f"[{name}]"
    return name if argument.nargs == 1 else f"{name}..."


TyperArgument._usage_display_name = _usage_name


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("headlab")
        except PackageNotFoundError:  # run from a source tree that is not installed
            from headlab import __version__ as number
        print(f"headlab {number}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Exact, fast and inspectable multi-head attention, and measured answers about heads."""


def _unwrap_help(typer_app: typer.Typer) -> None:
    """Give each command of ``typer_app`` (and of its groups) its docstring as help, with every
    paragraph on one line. Typer's rich help keeps a docstring's line breaks, so a paragraph
    wrapped in the source would break mid-sentence on screen; the terminal wraps it instead.
    The first paragraph is the one-line summary that ``headlab --help`` lists."""
    for info in typer_app.registered_commands:
        if info.help is None and info.callback is not None:
            paragraphs = (inspect.getdoc(info.callback) or "").split("\n\n")
            info.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _unwrap_help(group.typer_instance)


def _escape_option_help(typer_app: typer.Typer, done: set[int] | None = None) -> None:
    """Escape rich markup in the help of every option of ``typer_app`` (and of its groups).
    Typer's rich help reads ``[...]`` as a style tag and drops it, so a help text's own
    ``[default: --heads]`` would vanish from the screen. The option objects are shared between
    commands; ``done`` holds their ids so that none is escaped twice."""
    done = set() if done is None else done
    for info in typer_app.registered_commands:
        if info.callback is None:
            continue
        for parameter in inspect.signature(info.callback).parameters.values():
            option = parameter.default
            if isinstance(option, ParameterInfo) and option.help and id(option) not in done:
                done.add(id(option))
                option.help = escape(option.help)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _escape_option_help(group.typer_instance, done)


model_app = typer.Typer(
    help="Analyse the heads of a trained model: minilm (default), smollm2 or a path.",
    no_args_is_help=True,
)
sweep_app = typer.Typer(
    help="Train small attention models that differ only in the head split.",
    no_args_is_help=False,
)
# Each command module adds its command to its group here; none imports this module, nor another
# command module (no cycle). The order is the order of ``headlab --help``.
GROUPS = {
    app: (
        circuits_command,
        compare_command,
        grad_command,
        expressivity_command,
        formation_command,
        params_command,
        redundancy_command,
        report_command,
        specialisation_command,
        why_attends_command,
    ),
    model_app: (
        model_heads_command,
        model_collapse_command,
        model_importance_command,
        model_prune_command,
        model_ablate_command,
        model_generate_command,
        model_families_command,
        model_roles_command,
        model_kv_budget_command,
    ),
    sweep_app: (sweep_command, sweep_plot_command, sweep_summary_command),
}
for _group, _modules in GROUPS.items():
    for _module in _modules:
        _module.register(_group)
app.add_typer(model_app, name="model")
app.add_typer(sweep_app, name="sweep")
_unwrap_help(app)
_escape_option_help(app)

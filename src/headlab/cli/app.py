"""The typer application: the root options, and the command modules' commands registered on it."""

from __future__ import annotations

import typer
from typer.core import TyperOption

from headlab.cli import (
    compare,
    expressivity,
    model,
    params,
    redundancy,
    report,
    specialisation,
    sweep,
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


# Each command module adds its commands here; none of them imports this module (no cycle).
for _module in (compare, expressivity, model, params, redundancy, report, specialisation, sweep):
    _module.register(app)

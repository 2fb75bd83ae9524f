"""The CLI's layout: one module per command (``cli/commands/<command>_command.py``), none
importing another command module, no CLI module over 400 lines, and one group of model-source
options that every command taking ``--model`` shares."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer

import headlab.cli
from headlab.cli.app import app

CLI = Path(headlab.cli.__file__).parent
COMMANDS = CLI / "commands"
MAX_LINES = 400


def command_paths(command, prefix: tuple[str, ...] = ()):
    """(path, command) of every command; a group with its own callback (``sweep``) counts as a
    command too, a group without one (``model``, the root) does not."""
    subcommands = getattr(command, "commands", None)
    if subcommands is None or (prefix and command.callback is not None):
        yield prefix, command
    for name, sub in (subcommands or {}).items():
        yield from command_paths(sub, (*prefix, name))


PATHS = dict(command_paths(typer.main.get_command(app)))


def headlab_imports(path: Path) -> set[str]:
    """Every headlab module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("headlab.")}


@pytest.mark.parametrize("path", sorted(CLI.rglob("*.py")), ids=lambda p: p.name)
def test_no_cli_module_is_over_400_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(CLI)}: {lines} lines"


def test_each_command_has_its_own_module_named_for_it():
    """``headlab model kv-budget`` lives in ``model_kv_budget_command.py``, and every module
    there is one command's."""
    expected = {"_".join(path).replace("-", "_") + "_command" for path in PATHS}
    modules = {p.stem for p in COMMANDS.glob("*.py") if p.stem != "__init__"}
    assert modules == expected
    for path, command in PATHS.items():
        module = "_".join(path).replace("-", "_") + "_command"
        callback = command.callback
        while hasattr(callback, "__wrapped__"):  # model_source's wrapper
            callback = callback.__wrapped__
        assert callback.__module__ == f"headlab.cli.commands.{module}", path


@pytest.mark.parametrize("path", sorted(COMMANDS.glob("*_command.py")), ids=lambda p: p.stem)
def test_a_command_module_imports_no_other_command_module_nor_the_app(path):
    wrong = {
        name
        for name in headlab_imports(path)
        if name.startswith("headlab.cli.commands.") or name.startswith("headlab.cli.app")
    }
    assert wrong == set()


def test_only_the_app_imports_the_command_modules():
    importers = sorted(
        str(p.relative_to(CLI))
        for p in CLI.rglob("*.py")
        if p.parent != COMMANDS
        and any(n.startswith("headlab.cli.commands") for n in headlab_imports(p))
    )
    assert importers == ["app.py"]


SOURCE_OPTIONS = {"--model", "--download", "--trust-remote-code"}


def test_every_command_with_a_model_takes_the_one_group_of_source_options():
    """The group is written once (``cli/model_source.py``): every command with --model has its
    options, with the same help, and --model-dir means the same everywhere."""
    seen: dict[str, set[str]] = {}
    for path, command in PATHS.items():
        options = {opt: param for param in command.params for opt in getattr(param, "opts", [])}
        if "--model" not in options:
            continue
        assert set(options) >= SOURCE_OPTIONS, path
        for flag in ("--download", "--trust-remote-code", "--model-dir", "--backend"):
            if flag in options:
                seen.setdefault(flag, set()).add(options[flag].help)
    assert {flag: len(helps) for flag, helps in seen.items()} == dict.fromkeys(seen, 1)
    assert len([p for p, c in PATHS.items() if any("--model" in q.opts for q in c.params)]) >= 12


def test_the_group_refuses_a_command_without_its_parameter():
    from headlab.cli.model_source import model_source

    def no_source(x: int = 1) -> None: ...

    with pytest.raises(TypeError, match="no parameter 'source'"):
        model_source()(no_source)

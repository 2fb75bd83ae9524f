"""Every command of ``headlab --help``, every subcommand found recursively in the click tree,
run as a newcomer first runs it: with no options, and where it has required arguments, with only
those. Each either works (exit 0) or says in one line what it needs (exit 2, one
``headlab: error:`` line, no traceback), never anything else.

A command's defaults can take minutes (a sweep trains 45 models): a command still running after
``BUDGET_S`` seconds is stopped at its next progress step, or as it enters its work's own
progress, once it has checked its inputs and loaded its model, and counts as working then (it
printed no error)."""

from __future__ import annotations

import time

import pytest
import typer

from cli_run import run

#: After this long a command is stopped at its next progress step (it has started its work).
BUDGET_S = 5.0
#: Progress that opens the model: the command's work starts after it.
OPENING = ("loading the model", "reading the model's config")
#: The required arguments of the commands that have some, as a newcomer would pass them.
REQUIRED = {
    "model ablate": ["--ablate", "0.0"],
    "model generate": ["Hello"],
    "model roles": ["--documents", "{documents}"],
    "why-attends": ["--layer", "0", "--head", "0"],
}


class StartedItsWork(BaseException):
    """Raised from a progress step once the command has run ``BUDGET_S`` seconds."""


def _commands() -> dict:
    """'model heads' -> its click command (typer's), for every command and group that runs (a
    group that runs without a subcommand, as ``sweep``, is one too)."""
    from headlab.cli.app import app

    found = {}

    def walk(command, path: list[str]) -> None:
        if hasattr(command, "commands"):  # a group
            if command.invoke_without_command and path:
                found[" ".join(path)] = command
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        else:
            found[" ".join(path)] = command

    walk(typer.main.get_command(app), [])
    return found


def _required(command) -> list[str]:
    return [p.name for p in command.params if p.required]


def test_the_table_of_required_arguments_is_every_command_that_has_some():
    having = {name for name, command in _commands().items() if _required(command)}
    assert having == set(REQUIRED)


@pytest.fixture
def cut_after_budget(monkeypatch):
    """Progress steps raise StartedItsWork once the command has run BUDGET_S seconds."""
    from contextlib import contextmanager

    from headlab.cli import progress as progress_module

    lines = progress_module.progress_lines
    started = [time.monotonic()]

    @contextmanager
    def cutting(description, total):
        # Its inputs checked and its model open, the command enters its work's own progress:
        # it has started that work (a long first step need not be waited for).
        if description not in OPENING and time.monotonic() - started[0] > BUDGET_S:
            raise StartedItsWork(description)
        with lines(description, total) as update:

            def step(done=None, total=None, detail=None):
                update(done, total, detail)
                if done and time.monotonic() - started[0] > BUDGET_S:
                    raise StartedItsWork(description)

            yield step

    monkeypatch.setattr(progress_module, "progress_lines", cutting)
    monkeypatch.setenv("HEADLAB_PROGRESS_AFTER", "never")
    return started


def _says_what_it_needs(code, err: str) -> bool:
    return code == 2 and err.count("\n") == 1 and err.startswith("headlab: error:")


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("name", list(_commands()))
def test_every_command_works_on_its_defaults_or_says_what_it_needs(
    name, tmp_path, monkeypatch, capsys, cut_after_budget
):
    monkeypatch.chdir(tmp_path)  # the default output paths are made here
    documents = tmp_path / "documents"
    documents.mkdir()
    (documents / "a.txt").write_text("The cat sat on the mat. The cat sat on the mat. " * 8)
    argvs = [name.split()]
    if name in REQUIRED:
        argvs.append([*name.split(), *(a.format(documents=documents) for a in REQUIRED[name])])
    for argv in argvs:
        cut_after_budget[0] = time.monotonic()
        try:
            code, _, err = run(argv, capsys)
        except StartedItsWork:
            code, _, err = "started", *capsys.readouterr()
        assert "Traceback" not in err, (argv, err)
        if argv is argvs[0] and name in REQUIRED:  # without them: what it needs, in one line
            assert _says_what_it_needs(code, err), (argv, code, err)
            named = [
                f"'{shown}'"
                for p in _commands()[name].params
                if p.required
                for shown in (*p.opts, p.name)
            ]
            assert any(shown in err for shown in named), (named, err)
            continue
        works = code in (0, "started") and "error" not in err
        assert works or _says_what_it_needs(code, err), (argv, code, err)

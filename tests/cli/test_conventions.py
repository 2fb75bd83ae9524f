"""CLI conventions: --version, -h, flags without a placeholder, bare groups, one list syntax."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest
import typer

from cli_run import run
from headlab.cli.app import app
from headlab.cli.parsing import int_list


def command_paths(command=None, path=()):
    """Every command and group of the app as (argv prefix, click command)."""
    command = typer.main.get_command(app) if command is None else command
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from command_paths(sub, (*path, name))


PATHS = [path for path, _ in command_paths()]


def test_version_prints_the_installed_version(capsys):
    code, out, err = run(["--version"], capsys)
    assert code == 0 and err == ""
    assert out == f"headlab {version('headlab')}\n"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "headlab")
def test_h_is_help_and_flags_show_no_bool_placeholder(path, capsys):
    code, long_help, _ = run([*path, "--help"], capsys)
    assert code == 0 and "Usage: headlab" in long_help
    code, short_help, _ = run([*path, "-h"], capsys)
    assert code == 0 and short_help == long_help
    assert "<bool>" not in long_help


def test_every_bool_option_is_a_flag():
    for path, command in command_paths():
        for param in command.params:
            if param.type_descriptor.annotation is bool:
                assert param.is_flag, (path, param.name)


@pytest.mark.parametrize("path", [[], ["model"]])
def test_a_bare_group_prints_its_help_and_exits_0_without_an_error_line(path, capsys):
    code, out, err = run(path, capsys)
    assert code == 0 and "Usage: headlab" in out and "Commands" in out
    assert "error" not in err


def test_int_list_is_the_one_list_syntax():
    assert int_list("1,2,4,8", "--heads") == [1, 2, 4, 8]
    assert int_list(" 3 , 5", "--heads") == [3, 5]
    assert int_list("", "--heads") is None
    with pytest.raises(ValueError, match="--heads takes comma-separated integers, got 'x'"):
        int_list("1,x", "--heads")
    with pytest.raises(ValueError, match="--kv-heads values must be positive, got 0"):
        int_list("0", "--kv-heads")


def test_params_names_its_flags_not_library_arguments(capsys):
    code, _, err = run(["params", "--d-model", "10", "--heads", "2,3"], capsys)
    assert code == 2 and "--d-model 10 is not divisible by --heads 3" in err
    assert "head_dim=" not in err and "num_heads=" not in err
    code, out, _ = run(["params", "--d-model", "12", "--heads", "1,2,3", "--json"], capsys)
    assert code == 0 and [r["num_heads"] for r in json.loads(out)] == [1, 2, 3]


def test_collapse_takes_heads_as_a_list(tiny_dir, tmp_path, capsys):
    out = tmp_path / "c.json"
    args = ["model", "collapse", "--model-dir", str(tiny_dir), "--n-texts", "4", "--json"]
    code, printed, err = run([*args, "--heads", "1,3", "--out", str(out)], capsys)
    assert code == 0, err
    assert [r["num_heads"] for r in json.loads(printed)["all_layers"]] == [1, 3]
    code, _, err = run([*args, "--heads", "2", "--out", str(out), "--force"], capsys)
    assert code == 2 and "--heads 2 does not divide" in err and "choose from 1,3" in err


def test_compare_and_grad_take_kv_heads_and_head_dim_like_the_library(capsys):
    from headlab.analysis.scenarios import CompareRequest, run_setup

    argv = ["--d-model", "12", "--heads", "4", "--kv-heads", "2", "--head-dim", "6"]
    argv += ["--vs-heads", "2", "--seq-len", "5", "--init", "normal"]
    code, out, err = run(["compare", *argv, "--output-projection", "--json"], capsys)
    assert code == 0, err
    setup = CompareRequest(
        d_model=12,
        heads=4,
        kv_heads=2,
        head_dim=6,
        vs_heads=2,
        seq_len=5,
        init="normal",
        output_projection=True,
    )
    assert json.loads(out)["max_abs_diff"] == run_setup(setup).max_abs_diff
    code, out, err = run(["grad", *argv, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["setup"]["kv_heads"] == 2 and doc["setup"]["head_dim"] == 6
    code, _, err = run(["compare", *argv], capsys)
    assert code == 2 and "set --output-projection" in err and err.count("\n") == 1


def test_command_modules_do_not_import_the_app():
    """cli/app.py imports the command modules and registers them: no import cycle."""
    import subprocess
    import sys

    import headlab.cli.commands

    folder = Path(headlab.cli.commands.__file__).parent
    modules = sorted(p.stem for p in folder.glob("*_command.py"))
    code = "; ".join(
        [
            *(f"import headlab.cli.commands.{m}" for m in modules),
            "import sys",
            "assert 'headlab.cli.app' not in sys.modules, 'a command module imported the app'",
        ]
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    names |= {g.name for g in app.registered_groups}
    assert {"compare", "grad", "params", "report", "model", "sweep"} <= names


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "headlab")
def test_help_is_one_line_summary_then_paragraphs_the_terminal_wraps(path):
    command = dict(command_paths())[path]
    summary, *paragraphs = (command.help or "").split("\n\n")
    assert summary and "\n" not in summary and len(summary) <= 100, summary
    for paragraph in paragraphs:  # a line break kept from the source splits a sentence on screen
        assert "\n" not in paragraph, paragraph


@pytest.mark.parametrize("name", ["expressivity", "redundancy", "specialisation"])
def test_the_command_list_shows_each_summary_on_one_row_at_80_columns(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(["--help"], capsys)
    summary = dict(command_paths())[(name,)].help.split("\n\n")[0]
    row = next(line for line in out.splitlines() if f"│ {name} " in line)
    assert code == 0 and summary in row


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "headlab")
def test_help_shows_bracketed_text_and_cuts_nothing_at_80_columns(path, capsys, monkeypatch):
    """Rich read an option's own "[default: --heads]" as a style tag and dropped it; and
    --output-projection/--no-output-projection took so wide a column that its name was cut."""
    monkeypatch.setenv("COLUMNS", "400")  # one row per option: the help text reads whole
    code, wide, _ = run([*path, "--help"], capsys)
    for param in dict(command_paths())[path].params:
        if getattr(param, "help", None):
            assert param.help.replace("\\[", "[") in wide, (param.name, param.help)
    monkeypatch.setenv("COLUMNS", "80")
    code, narrow, _ = run([*path, "--help"], capsys)
    assert code == 0 and "…" not in narrow


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "headlab")
def test_help_names_only_flags_the_command_has_and_usage_shows_plain_arguments(path, capsys):
    """An option's help that mentions --figure on a command without --figure misleads; an
    argument shows as PROMPT in the usage line, not as {prompt}."""
    import re

    command = dict(command_paths())[path]
    flags = {opt for param in command.params for opt in getattr(param, "opts", [])}
    for param in command.params:
        mentioned = set(re.findall(r"--[a-z][a-z0-9-]*", getattr(param, "help", None) or ""))
        assert mentioned <= flags, (param.name, mentioned - flags)
    usage = next(line for line in run([*path, "--help"], capsys)[1].splitlines() if "Usage" in line)
    assert "{" not in usage, usage


def test_report_force_help_says_what_force_refuses(capsys):
    """--force never replaces a folder headlab did not write (test_nothing_lost): its help must
    not promise that it does."""
    command = dict(command_paths())[("report",)]
    (force,) = [p for p in command.params if p.name == "force"]
    assert "not a headlab report" not in force.help
    assert "Never a folder headlab did not write" in force.help
    assert "files a user added inside a headlab folder" in force.help


def test_every_force_help_says_it_replaces_only_headlab_output(capsys):
    """--force replaces headlab's own output of another kind, never a user's file: no command's
    help may promise more."""
    helps = {
        path: param.help
        for path, command in command_paths()
        for param in command.params
        if param.name == "force"
    }
    assert len(helps) > 10
    for path, text in helps.items():
        assert "headlab's own output of another kind" in text, (path, text)
        assert "never a file headlab did not write" in text.lower() or "Never a folder" in text

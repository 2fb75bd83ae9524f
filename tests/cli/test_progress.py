"""The progress bars of the long commands: on stderr when it is a terminal, naming what runs;
nothing with --json, and nothing when stderr is not a terminal."""

from __future__ import annotations

import io
import json
import threading

import pytest
from rich.console import Console

import headlab.cli.progress as progress_module
from headlab.cli.main import main

LINES = ["the first text has a few words", "a second text, with punctuation", "three words here"]
TINY_SWEEP = ["--heads", "1,2", "--d-model", "8", "--seeds", "1", "--steps", "4", "--workers", "1"]


@pytest.fixture
def terminal(monkeypatch):
    """stderr as a terminal: what the bars draw, as text."""
    screen = io.StringIO()

    def console(stderr: bool = False) -> Console:
        return Console(file=screen, force_terminal=True, width=160)

    monkeypatch.setattr(progress_module, "Console", console)
    return screen


def model_command(name, tiny_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(LINES) + "\n")
    extra = ["--ablate", "1.2"] if name == "ablate" else []
    return [
        "model",
        name,
        "--model-dir",
        str(tiny_dir),
        "--corpus",
        str(corpus),
        "--out",
        str(tmp_path / f"{name}.json"),
        "--force",
        *extra,
    ]


DESCRIPTIONS = {
    "heads": "head statistics: texts",
    "importance": "importance: batches",
    "collapse": "collapse: model runs",
    "prune": "pruning: model runs",
    "ablate": "ablation: passes",
}


@pytest.mark.parametrize("name", list(DESCRIPTIONS))
def test_model_commands_draw_a_bar_on_a_terminal_and_none_with_json(
    name, tiny_dir, tmp_path, terminal, capsys
):
    argv = model_command(name, tiny_dir, tmp_path)
    main(argv)
    assert DESCRIPTIONS[name] in terminal.getvalue()
    capsys.readouterr()
    terminal.seek(0), terminal.truncate()
    main([*argv, "--json"])
    json.loads(capsys.readouterr().out)  # stdout is the document only
    assert terminal.getvalue() == ""


@pytest.mark.parametrize("name", ["heads", "ablate"])
def test_no_bar_when_stderr_is_not_a_terminal(name, tiny_dir, tmp_path, capsys):
    main(model_command(name, tiny_dir, tmp_path))
    assert capsys.readouterr().err == ""  # pytest's stderr is no terminal


def test_the_sweep_bar_names_the_run_whose_loss_it_shows(tmp_path, terminal, capsys):
    main(["sweep", *TINY_SWEEP, "--out", str(tmp_path / "s.jsonl")])
    screen = terminal.getvalue()
    assert "sweep: runs" in screen
    assert "loss " in screen and " of h=" in screen and "seed 0" in screen
    assert capsys.readouterr().err == ""


def test_the_sweep_draws_nothing_when_stderr_is_not_a_terminal(tmp_path, capsys):
    main(["sweep", *TINY_SWEEP, "--out", str(tmp_path / "s.jsonl")])
    assert capsys.readouterr().err == ""


def test_redundancy_draws_its_bar_on_a_terminal_only(tiny_dir, tmp_path, terminal, capsys):
    argv = [
        "redundancy",
        "--model",
        str(tiny_dir),
        "--n-texts",
        "4",
        "--max-length",
        "8",
        "--ranks",
        "4,2",
        "--out",
        str(tmp_path / "r.json"),
    ]
    main([*argv, "--json"])
    assert terminal.getvalue() == ""
    main([*argv, "--force"])
    assert "redundancy: layers and ranks" in terminal.getvalue()


def test_generate_and_ablation_report_their_steps(tiny_llama):
    from headlab.heads.ablation import ablation_effect

    tokens: list[int] = []
    new = tiny_llama.generate("a b c", 3, on_token=tokens.append)
    assert tokens == list(range(1, len(new) + 1))
    steps: list[tuple[int, int]] = []
    ablation_effect(
        tiny_llama, LINES, [(0, 1)], max_length=8, on_step=lambda d, t: steps.append((d, t))
    )
    assert steps == [(1, 2), (2, 2)]


def test_the_expressivity_bar_covers_the_model_patterns_then_the_fits(
    tiny_dir, tmp_path, terminal, capsys
):
    argv = [
        "expressivity",
        "--model",
        str(tiny_dir),
        "--seq-lens",
        "4",
        "--head-dims",
        "1,2",
        "--targets",
        "1",
        "--steps",
        "2",
        "--heads",
        "2",
        "--out",
        str(tmp_path / "e.json"),
    ]
    main(argv)
    screen = terminal.getvalue()
    # 1 length of model patterns, then (random + model) x 2 head sizes + 2 offset fits
    assert "expressivity: model patterns, then fits" in screen and "/7" in screen
    assert " patterns" in screen and "fits" in screen
    assert capsys.readouterr().err == ""


def test_expressivity_reports_its_fits_total():
    from headlab.analysis.expressivity import ExpressivityRequest, measure_expressivity

    config = ExpressivityRequest(
        seq_lens=(4,), head_dims=(1, 2), targets=1, steps=2, heads=2, offset_steps=2
    )
    steps: list[tuple[int, int]] = []
    measure_expressivity(config, on_step=lambda d, t: steps.append((d, t)))
    assert steps == [(d, config.fits_total()) for d in range(1, 5)] and config.fits_total() == 4


def _long_text_commands(llama_dir, tmp_path):
    """``model heads --text-file`` and ``model kv-budget`` on the tiny Llama (the two commands
    the last issue found silent for 43 s and 135 s)."""
    passage = " ".join(f"t{(11 * i) % 97}" for i in range(12))
    text = tmp_path / "book.txt"
    text.write_text(f"t1 {passage} {' '.join(f't{i % 89}' for i in range(30))} {passage}")
    heads = [
        "model",
        "heads",
        "--model",
        str(llama_dir),
        "--text-file",
        str(text),
        "--window",
        "8",
        "--out",
        str(tmp_path / "lc.json"),
        "--force",
    ]
    budget = [
        "model",
        "kv-budget",
        "--model",
        str(llama_dir),
        "--text-file",
        str(text),
        "--calibration-file",
        str(text),
        "--window",
        "8",
        "--budgets",
        "0.5",
        "--out",
        str(tmp_path / "kv.json"),
        "--force",
    ]
    return {"one long text: layers": heads, "KV budget: model runs": budget}


@pytest.fixture
def llama_dir(tiny_llama_dir):
    return tiny_llama_dir


def test_long_commands_print_lines_where_stderr_is_no_terminal(
    llama_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(progress_module.AFTER_VARIABLE, "0")
    monkeypatch.setattr(progress_module, "EVERY_S", 0.001)
    for description, argv in _long_text_commands(llama_dir, tmp_path).items():
        main(argv)
        err = capsys.readouterr().err.splitlines()
        assert any(line.startswith("headlab: loading the model, ") for line in err)  # a pulse
        mine = [line for line in err if line.startswith(f"headlab: {description} ")]
        assert mine and mine[-1].endswith(", done")
        done, total = mine[-1].split()[-4].rstrip(",").split("/")
        assert done == total  # the last line counts every step
        main([*argv, "--json"])
        assert capsys.readouterr().err == ""


def test_no_line_before_the_delay(llama_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(progress_module.AFTER_VARIABLE, "60")
    for argv in _long_text_commands(llama_dir, tmp_path).values():
        main(argv)
        assert capsys.readouterr().err == ""


def test_the_long_text_commands_draw_a_bar_on_a_terminal(llama_dir, tmp_path, terminal, capsys):
    for description, argv in _long_text_commands(llama_dir, tmp_path).items():
        main(argv)
        assert description in terminal.getvalue()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("", 2.0), ("0", 0.0), ("3.5", 3.5), ("never", None), ("-1", 2.0), ("nan", 2.0), ("x", 2.0)],
)
def test_the_first_line_waits_as_the_variable_says(value, seconds, monkeypatch):
    monkeypatch.setenv(progress_module.AFTER_VARIABLE, value)
    got = progress_module.first_line_s()
    assert got == (threading.TIMEOUT_MAX if seconds is None else seconds)

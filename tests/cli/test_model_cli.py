"""``headlab model ...`` on the tiny random BERT: exit codes, JSON documents, results files."""

from __future__ import annotations

import json

import pytest

from headlab.cli.main import main

LINES = [
    "The first line of the corpus has a few words.",
    "A second line, with punctuation!",
    "Ünïcödé line three here",
    "and a fourth line to make batches",
    "five words in this line",
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


def run_ok(argv, capsys):
    main(argv)
    return capsys.readouterr()


KEYS = {
    "heads": {"headlab", "model", "n_texts", "num_layers", "num_heads", "metrics"},
    "collapse": {"headlab", "model", "n_texts", "all_layers", "per_layer"},
    "importance": {"headlab", "model", "n_texts", "objective", "importance", "raw"},
    "prune": {"headlab", "model", "n_texts", "steps"},
}


@pytest.mark.parametrize("command", ["heads", "collapse", "importance", "prune"])
def test_commands_print_and_write_json(command, tiny_dir, corpus, tmp_path, capsys):
    out = tmp_path / "results" / f"model_{command}.json"
    args = ["model", command, "--model-dir", str(tiny_dir), "--corpus", str(corpus)]
    captured = run_ok([*args, "--json", "--out", str(out)], capsys)
    printed = json.loads(captured.out)
    assert set(printed) == KEYS[command]
    assert printed == json.loads(out.read_text())
    assert printed["n_texts"] == 5 and printed["model"] == tiny_dir.name
    if command == "prune":
        orders = {s["order"] for s in printed["steps"]}
        assert orders == {"importance", "random"} and len(printed["steps"]) == 22


def test_table_output_and_figure(tiny_dir, corpus, tmp_path, capsys):
    out, fig = tmp_path / "h.json", tmp_path / "grid.png"
    args = ["model", "heads", "--model-dir", str(tiny_dir), "--corpus", str(corpus)]
    captured = run_ok([*args, "--out", str(out), "--figure", str(fig), "--metric", "cls"], capsys)
    assert "cls per head" in captured.out and f"wrote {out}" in captured.out
    assert fig.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model-dir", "/nonexistent/model"], "no such file or folder"),
        (["--n-texts", "0"], "--n-texts must be between 1 and"),
        (["--metric", "nope"], "--metric must be one of"),
        (["--corpus", "/nonexistent/corpus.txt"], "corpus file"),
    ],
)
def test_bad_input_is_one_line_exit_2(extra, message, tiny_dir, tmp_path, capsys):
    argv = ["model", "heads", "--model-dir", str(tiny_dir), "--out", str(tmp_path / "x.json")]
    code, out, err = run([*argv, *extra], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("headlab: error:") and message in err


@pytest.mark.parametrize("long_text", [[], ["--max-tokens", "20"]], ids=["corpus", "long"])
def test_an_unknown_metric_is_refused_before_the_statistics(
    long_text, tiny_dir, tmp_path, capsys, monkeypatch
):
    """It was checked against the finished statistics: 39 s of MiniLM before the error."""
    import headlab.heads
    import headlab.heads.long_context

    def never(*args, **kwargs):
        raise AssertionError("statistics computed before --metric was checked")

    monkeypatch.setattr(headlab.heads, "head_statistics", never)
    monkeypatch.setattr(headlab.heads.long_context, "long_text_statistics", never)
    argv = ["model", "heads", "--model-dir", str(tiny_dir), "--out", str(tmp_path / "x.json")]
    code, out, err = run([*argv, *long_text, "--metric", "first"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("headlab: error: --metric must be one of entropy, max_weight, cls, sep")
    assert err.rstrip().endswith("for this model, got 'first'")


def test_bad_model_dir_file(tiny_dir, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "gpt2"}')
    code, _, err = run(["model", "collapse", "--model-dir", str(broken)], capsys)
    # a gpt2 folder goes to the transformers route (issue 22), which finds no weights in it
    assert code == 2 and "broken: no *.safetensors weights" in err


def test_refuses_to_overwrite_foreign_file(tiny_dir, corpus, tmp_path, capsys):
    foreign = tmp_path / "notes.json"
    foreign.write_text("my notes")
    argv = ["model", "importance", "--model-dir", str(tiny_dir), "--corpus", str(corpus)]
    for force in ([], ["--force"]):
        code, _, err = run([*argv, "--out", str(foreign), *force], capsys)
        assert code == 2 and "headlab did not write it" in err
        assert foreign.read_text() == "my notes"

"""``headlab model heads --text-file/--max-tokens``: one long text, its document and its errors."""

from __future__ import annotations

import json

import pytest

from headlab.cli.main import main


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


@pytest.fixture
def llama_dir(tiny_llama, tmp_path_factory):
    """The folder tiny_llama was loaded from (its name is the model's name)."""
    return next(
        p for p in tmp_path_factory.getbasetemp().glob("tiny-llama*/") if p.name == tiny_llama.name
    )


def test_a_long_text_cut_to_max_tokens(llama_dir, tmp_path, capsys):
    text = tmp_path / "book.txt"
    text.write_text(" ".join(f"t{i % 97}" for i in range(50)), encoding="utf-8")
    out = tmp_path / "lc.json"
    args = ["model", "heads", "--model", str(llama_dir), "--text-file", str(text)]
    main([*args, "--max-tokens", "19", "--json", "--out", str(out)])
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["context"] == {"n_tokens": 19, "text_tokens": 50, "truncated": True}
    assert printed["headlab"] == "model-long-context"
    assert len(printed["heavy_hitters"]["top_share"]) == 3
    first = [v for row in printed["metrics"]["first"] for v in row]
    assert printed["findings"]["sinks"] == sum(v > 0.3 for v in first)
    main([*args, "--out", str(tmp_path / "table.json")])
    shown = " ".join(capsys.readouterr().out.split())  # titles wrap
    assert "one text of 50 tokens" in shown and "attention sinks" in shown


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--text-file", "EMPTY"], "empty file"),
        (["--text-file", "MISSING"], "does not exist"),
        (["--max-tokens", "100000"], "--max-tokens must be between 2 and 64"),
        (["--max-tokens", "8", "--corpus", "EMPTY"], "--corpus and --max-length"),
    ],
)
def test_bad_long_text_input_is_one_line_exit_2(extra, message, llama_dir, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    extra = [
        {"EMPTY": str(empty), "MISSING": str(tmp_path / "missing.txt")}.get(a, a) for a in extra
    ]
    argv = ["model", "heads", "--model", str(llama_dir), *extra, "--out", str(tmp_path / "o.json")]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()

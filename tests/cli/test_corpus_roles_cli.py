"""``headlab model roles``: a folder of documents, the merged roles table and document, resume,
and bad input as one line with exit 2 before any model loads."""

from __future__ import annotations

import json

import pytest

from cli_run import run
from corpus_documents import documents
from headlab.results.corpus_roles_result import CorpusRolesResult


@pytest.fixture
def folder(tiny_llama, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in documents(tiny_llama).items():
        (docs / f"{name}.txt").write_text(text, encoding="utf-8")
    return docs


def argv(model_dir, folder, tmp_path, *extra):
    return [
        "model",
        "roles",
        "--model",
        str(model_dir),
        "--documents",
        str(folder),
        "--sinks",
        "2",
        "--window",
        "8",
        "--out",
        str(tmp_path / "roles.jsonl"),
        "--summary",
        str(tmp_path / "roles.json"),
        *extra,
    ]


def test_roles_over_a_folder_resume_and_json(tiny_llama_dir, folder, tmp_path, capsys):
    code, out, err = run(argv(tiny_llama_dir, folder, tmp_path), capsys)
    assert code == 0, err
    shown = " ".join(out.split())
    assert "3 documents, 0 already finished" in shown and "3 to run on 1 worker(s)" in shown
    assert "over 3 documents: 118 tokens (112 in documents longer than the window)" in shown
    assert "role of each head" in shown and f"wrote {tmp_path / 'roles.json'}" in shown
    summary = json.loads((tmp_path / "roles.json").read_text())
    assert summary["headlab"] == "model-corpus-roles"
    result = CorpusRolesResult.from_dict(summary)
    assert result.corpus.documents == 3 and result.roles.roles is not None
    assert len((tmp_path / "roles.jsonl").read_text().splitlines()) == 3
    code, out, err = run(argv(tiny_llama_dir, folder, tmp_path, "--json"), capsys)
    assert code == 0, err
    assert "3 already finished" in err and "0 to run" in err
    assert json.loads(out) == summary  # the same merged document, nothing run again
    assert len((tmp_path / "roles.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--documents", "MISSING"], "--documents folder MISSING does not exist"),
        (["--documents", "EMPTY"], "holds no .txt files"),
        (["--documents", "FILE"], "--documents FILE is not a folder of .txt files"),
        (["--documents", "BLANK"], "blank.txt: expected text, got an empty file"),
        (["--window", "0"], "--window must be between 1"),
        (["--sinks", "-1"], "--sinks must be between 0"),
        (["--max-tokens", "9"], "--max-tokens 9 is not longer than sinks 2 + window 8"),
        (["--executor", "spark"], "--executor must be 'local' or 'ray', got 'spark'"),
        (["--workers", "0"], "--workers must be >= 1, got 0"),
        (["--model", "MISSING"], "--model must be one of"),
        (["--summary", "OUT"], "--out and --summary must be different files"),
        (["--out", "FILE"], "--out FILE holds no results rows"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_any_model_loads(
    extra, message, tiny_llama_dir, folder, tmp_path, capsys, monkeypatch
):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("headlab.models.load", no_loading)
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("my notes\n")
    blank = tmp_path / "blank"
    blank.mkdir()
    (blank / "a.txt").write_text("t1 t2")
    (blank / "blank.txt").write_text(" \n")
    paths = {
        "MISSING": tmp_path / "missing",
        "EMPTY": tmp_path / "empty",
        "BLANK": blank,
        "FILE": tmp_path / "notes.txt",
        "OUT": tmp_path / "roles.jsonl",
    }
    extra = [str(paths.get(a, a)) for a in extra]
    message = message.replace("MISSING", str(paths["MISSING"])).replace("FILE", str(paths["FILE"]))
    code, _, err = run(argv(tiny_llama_dir, folder, tmp_path, *extra), capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and message in err, err
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"


def test_max_tokens_beyond_the_models_context_is_one_line(tiny_llama_dir, folder, tmp_path, capsys):
    code, _, err = run(argv(tiny_llama_dir, folder, tmp_path, "--max-tokens", "100"), capsys)
    assert code == 2 and err.count("\n") == 1
    assert "--max-tokens must be between 2 and 64, got 100" in err

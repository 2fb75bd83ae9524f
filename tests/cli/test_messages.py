"""Messages name what the person typed: the flag they passed (--summary, --n-texts), the limit
that applied (--max-tokens or the model's context), never a Python argument."""

from __future__ import annotations

import pytest

from cli_run import run


def _roles(model_dir, docs, tmp_path, *extra):
    return [
        "model",
        "roles",
        "--model",
        str(model_dir),
        "--documents",
        str(docs),
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


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    # 100 and 30 words of the tiny Llama's vocabulary (one token each): 64 positions cut one
    (folder / "long.txt").write_text(" ".join(f"t{i % 90 + 1}" for i in range(100)))
    (folder / "short.txt").write_text(" ".join(f"t{i + 1}" for i in range(30)))
    return folder


def test_a_refused_summary_names_summary(tiny_llama_dir, docs, tmp_path, capsys):
    (tmp_path / "roles.json").write_text("my notes\n")
    code, printed, err = run(_roles(tiny_llama_dir, docs, tmp_path), capsys)
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"headlab: error: --summary {tmp_path / 'roles.json'} exists")
    assert "--out" not in err
    assert (tmp_path / "roles.json").read_text() == "my notes\n"


@pytest.mark.parametrize(
    ("extra", "cut"),
    [([], "1 cut to the model's context"), (["--max-tokens", "40"], "1 cut to --max-tokens 40")],
)
def test_roles_names_the_limit_that_cut(tiny_llama_dir, docs, tmp_path, extra, cut, capsys):
    code, printed, err = run(_roles(tiny_llama_dir, docs, tmp_path, *extra), capsys)
    assert code == 0, err
    shown = " ".join(printed.split())
    assert f"over 2 documents, {cut}:" in shown


@pytest.mark.parametrize("command", [["model", "heads"], ["redundancy"]])
def test_too_many_default_texts_name_the_flag_before_the_model_loads(command, tmp_path, capsys):
    # a model that does not exist: the --n-texts error comes first, so nothing was loaded
    missing = str(tmp_path / "no-model")
    code, printed, err = run(
        [*command, "--model", missing, "--n-texts", "5000", "--out", str(tmp_path / "o.json")],
        capsys,
    )
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1
    assert "--n-texts must be at most" in err and "got 5000" in err and "n_texts" not in err

"""Files a hostile user hands headlab (issue 31): a FIFO or ``/dev/zero`` in a model folder, JSON
nested past any parser's recursion. Each is one line and exit 2, fast and in little memory; the
model folders run as real processes (the old code blocked for good or grew without bound), under
a time and an address-space limit."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FIFOs and /dev/zero")

DEEP = "[" * 100_000 + "]" * 100_000  # past CPython's recursion limit (RecursionError)


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))


def headlab(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    try:
        return subprocess.run(
            [sys.executable, "-m", "headlab", *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_limited,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"headlab {' '.join(argv)} did not end (it opened a file that never ends)")


@pytest.mark.parametrize(
    ("name", "make", "message"),
    [
        ("model.safetensors", "fifo", "model.safetensors is a FIFO, expected a regular file"),
        ("config.json", "fifo", "config.json is a FIFO, expected a regular file"),
        ("tokenizer_config.json", "dev-zero", "tokenizer_config.json is a character device"),
        ("tokenizer.json", "deep", "tokenizer.json: expected JSON nested at most 64 deep"),
    ],
)
def test_a_model_folder_with_a_file_that_never_ends_is_one_line(
    tiny_llama_dir, tmp_path, name, make, message
):
    folder = tmp_path / "model"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "tokenizer_config.json").write_text("{}")
    path = folder / name
    path.unlink()
    if make == "fifo":
        os.mkfifo(path)
    elif make == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text(DEEP)
    done = headlab(["model", "heads", "--model-dir", str(folder)], tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_a_fifo_given_as_the_model_is_named(tmp_path):
    os.mkfifo(tmp_path / "model.gguf")
    done = headlab(["model", "heads", "--model", str(tmp_path / "model.gguf")], tmp_path)
    assert done.returncode == 2
    assert "model.gguf is a FIFO, expected a regular file" in done.stderr


def test_a_deeply_nested_results_file_is_skipped_and_the_report_still_built(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    (results / "model_heads.json").write_text(DEEP)
    code, _, err = run(
        ["report", "--out", str(tmp_path / "rep"), "--text", "a b", "--results", str(results)],
        capsys,
    )
    assert code == 0, err
    assert "skipped" in err and "model_heads.json" in err and "nested at most 64 deep" in err
    assert (tmp_path / "rep" / "index.html").is_file()


def test_an_existing_deeply_nested_out_is_refused_not_a_recursion_error(tmp_path, capsys):
    out = tmp_path / "deep.json"
    out.write_text(DEEP)
    for force in ([], ["--force"]):
        code, _, err = run(["expressivity", "--out", str(out), *force], capsys)
        assert code == 2
        assert "deep.json exists and headlab did not write it" in err
        assert out.read_text() == DEEP


def test_a_results_line_nested_too_deep_is_skipped_naming_the_line(tmp_path):
    from headlab.results.jsonl_store import read_results

    path = tmp_path / "sweep.jsonl"
    path.write_text('{"run_id": "a"}\n{"run_id": ' + DEEP + "}\n")
    skipped = read_results(path).skipped
    assert [(s.number, s.reason) for s in skipped][1] == (
        2,
        "JSON nested 100001 deep, expected at most 64",
    )

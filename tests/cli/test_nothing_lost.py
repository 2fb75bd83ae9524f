"""Nothing lost, nothing overwritten: every output path through the real entry point.

Each case checks the exit code, a one-line stderr message, and that no file around changed
(sha256 of every file under the test's folder before and after).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from cli_run import run
from headlab.experiments.run_sizing import make_config
from headlab.results.jsonl_writer import ResultsWriter
from headlab.results.locations import RESULTS_DIR

TINY_SWEEP = ["--heads", "1,2", "--d-model", "8", "--seeds", "1", "--steps", "2", "--workers", "1"]


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def refused(argv: list[str], capsys, folder: Path, message: str) -> None:
    before = snapshot(folder)
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("headlab: error:"), err
    assert message in err, err
    assert snapshot(folder) == before


def row(seed: int) -> dict:
    config = make_config("multi-lookup", 2, d_model=8, seed=seed, steps=2)
    return {
        "run_id": config.run_id,
        "config": config.to_dict(),
        "step": 2,
        "loss": 1.0,
        "accuracy": 0.5,
        "final": True,
        "head_entropy": [0.5, 0.5],
        "params": 100,
        "seconds": 0.1,
    }


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(row(s)) + "\n" for s in range(2)))
    return path


def test_sweep_plot_never_replaces_its_results_or_a_user_file(tmp_path, results, capsys):
    for force in ([], ["--force"]):  # its own input: not even with --force (issue 31)
        refused(
            ["sweep", "plot", "--results", str(results), "--out", str(results), *force],
            capsys,
            tmp_path,
            "is this command's input",
        )
    thesis = tmp_path / "thesis.txt"
    thesis.write_text("chapter one")
    argv = ["sweep", "plot", "--results", str(results), "--out", str(thesis)]
    for force in ([], ["--force"]):  # a user's file: not even with --force
        refused([*argv, *force], capsys, tmp_path, "headlab did not write it")
        refused([*argv, *force], capsys, tmp_path, "not even with --force (choose a new path")
    figure = tmp_path / "sweep.png"
    assert run(["sweep", "plot", "--results", str(results), "--out", str(figure)], capsys)[0] == 0
    assert run(["sweep", "plot", "--results", str(results), "--out", str(figure)], capsys)[0] == 0
    # headlab's results of another kind: replaced only with --force
    other = tmp_path / "heads.json"
    other.write_text(json.dumps({"headlab": "model-heads", "heads": []}))
    argv = ["sweep", "plot", "--results", str(results), "--out", str(other)]
    refused(argv, capsys, tmp_path, "holds headlab model-heads results (JSON)")
    refused(argv, capsys, tmp_path, "pass --force to replace it")
    assert run([*argv, "--force"], capsys)[0] == 0  # replacing wanted: --force
    assert other.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("target", ["/dev/null", "fifo", "directory", "symlink"])
def test_devices_fifos_folders_and_links_are_refused_even_with_force(
    tmp_path, results, capsys, target
):
    if target == "fifo":
        out = tmp_path / "pipe"
        os.mkfifo(out)
    elif target == "directory":
        out = tmp_path / "folder"
        out.mkdir()
    elif target == "symlink":
        (tmp_path / "elsewhere.png").write_text("someone's file")
        out = tmp_path / "link.png"
        out.symlink_to(tmp_path / "elsewhere.png")
    else:
        out = Path(target)
    for force in ([], ["--force"]):
        argv = ["sweep", "plot", "--results", str(results), "--out", str(out), *force]
        refused(argv, capsys, tmp_path, str(out))
    assert Path("/dev/null").is_char_device()


def test_model_outputs_are_checked_before_the_work_and_by_kind(tiny_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one text here\nanother text there\n")
    base = ["model", "heads", "--model-dir", str(tiny_dir), "--corpus", str(corpus)]
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    refused([*base, "--figure", str(notes)], capsys, tmp_path, "--figure")
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "mine", "question": "keep me"}))
    for force in ([], ["--force"]):  # a user's JSON: not even with --force
        refused([*base, "--out", str(request), *force], capsys, tmp_path, "did not write it")
    heads = tmp_path / "heads.json"
    assert run([*base, "--out", str(heads)], capsys)[0] == 0
    assert run([*base, "--out", str(heads)], capsys)[0] == 0  # its own kind: replaced
    importance = ["model", "importance", "--model-dir", str(tiny_dir), "--corpus", str(corpus)]
    refused([*importance, "--out", str(heads)], capsys, tmp_path, "model-importance")
    # headlab's results of another kind: --force replaces them
    assert run([*importance, "--out", str(heads), "--force"], capsys)[0] == 0
    assert json.loads(heads.read_text())["headlab"] == "model-importance"


def test_sweep_out_is_checked_before_training(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    refused(
        ["sweep", *TINY_SWEEP, "--out", str(blocker / "s.jsonl")],
        capsys,
        tmp_path,
        "is not a directory",
    )
    notes = tmp_path / "notes.jsonl"
    notes.write_text("my own notes\n")
    refused(["sweep", *TINY_SWEEP, "--out", str(notes)], capsys, tmp_path, "holds no results rows")


def test_a_merged_file_without_final_newline_keeps_its_last_run(tmp_path, capsys):
    out = tmp_path / "merged.jsonl"
    out.write_text("\n".join(json.dumps(row(s)) for s in range(2)))  # "\n".join: no final newline
    code, _, err = run(["sweep", *TINY_SWEEP, "--out", str(out)], capsys)
    assert code == 0, err
    run_ids = [json.loads(line)["run_id"] for line in out.read_text().splitlines()]
    assert run_ids[:2] == [row(0)["run_id"], row(1)["run_id"]]


def test_a_second_sweep_into_a_locked_file_is_refused(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    with ResultsWriter(out):
        refused(
            ["sweep", *TINY_SWEEP, "--out", str(out)], capsys, tmp_path, "another headlab sweep"
        )


def test_lines_that_are_not_results_are_reported_with_their_number(tmp_path, results, capsys):
    with results.open("a") as f:
        f.write('{"run_id":"abc"}\n')
        f.write(json.dumps({**row(5), "final": "false"}) + "\n")
    code, out, err = run(["sweep", "summary", "--results", str(results)], capsys)
    assert code == 0
    assert "skipped 2 lines" in err and "line 3: missing 'step'" in err and "line 4:" in err
    assert "multi-lookup" in out


def test_one_skipped_line_is_one_line(tmp_path, results, capsys):
    with results.open("a") as f:
        f.write('{"run_id":"abc"}\n')
    code, _, err = run(["sweep", "summary", "--results", str(results)], capsys)
    assert code == 0 and "skipped 1 line that is not a results row: line 3: missing" in err


def test_report_force_never_replaces_cwd_parents_inputs_or_foreign_folders(
    tmp_path, capsys, monkeypatch
):
    work = tmp_path / "work"
    work.mkdir()
    (work / "thesis.tex").write_text("mine")
    results = work / RESULTS_DIR
    results.mkdir()
    (results / "keep.json").write_text("{}")
    monkeypatch.chdir(work)
    for out in (".", "..", str(results), str(tmp_path)):
        refused(
            ["report", "--text", "a b", "--results", str(results), "--out", out, "--force"],
            capsys,
            tmp_path,
            "not replacing",
        )
    foreign = work / "site"
    foreign.mkdir()
    (foreign / "page.html").write_text("mine")
    refused(
        ["report", "--text", "a b", "--results", str(results), "--out", str(foreign), "--force"],
        capsys,
        tmp_path,
        "headlab did not write",
    )
    assert not [p for p in tmp_path.rglob("*") if ".old." in p.name or ".tmp." in p.name]


def test_a_folder_that_appears_during_the_build_is_not_destroyed(tmp_path, capsys, monkeypatch):
    from headlab.report import build as build_module

    out = tmp_path / "site"
    real_collect = build_module.collect

    def slow_collect(*args, **kwargs):
        out.mkdir()
        (out / "draft.md").write_text("written by someone during the build")
        return real_collect(*args, **kwargs)

    monkeypatch.setattr(build_module, "collect", slow_collect)
    code, _, err = run(
        ["report", "--text", "a b", "--results", str(tmp_path / "none"), "--out", str(out)], capsys
    )
    assert code == 2 and "headlab did not write" in err
    assert (out / "draft.md").read_text() == "written by someone during the build"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no temp folder left


def test_report_png_target_is_checked_before_the_report_is_replaced(tmp_path, capsys):
    report = tmp_path / "site"
    argv = ["report", "--text", "a b", "--results", str(tmp_path / "none"), "--out", str(report)]
    assert run(argv, capsys)[0] == 0
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    refused([*argv, "--png", str(blocker / "figs")], capsys, tmp_path, "is not a directory")


def test_user_text_with_dollars_is_drawn_verbatim(tmp_path, capsys):
    from headlab.results.output_policy import png_text_chunks

    figs = tmp_path / "figs"
    argv = ["report", "--text", "costs $x^$ now", "--results", str(tmp_path / "none")]
    code, _, err = run([*argv, "--out", str(tmp_path / "r"), "--png", str(figs)], capsys)
    assert code == 0, err
    png = (figs / "attention.png").read_bytes()
    assert png_text_chunks(png)["headlab"] == "report-figure"


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
@pytest.mark.parametrize("flag", ["--out", "--figure"])
def test_a_users_file_is_refused_even_with_force_naming_the_flag(tmp_path, capsys, flag, force):
    """``--out notes.txt --force`` over a user's text file: one line, exit 2, file unchanged."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    paths = {
        "--out": str(tmp_path / "e.json"),
        "--figure": str(tmp_path / "e.png"),
        flag: str(notes),
    }
    argv = ["expressivity", "--model", "none", *(x for kv in paths.items() for x in kv), *force]
    refused(argv, capsys, tmp_path, f"{flag} {notes} exists and headlab did not write it")
    err = run(argv, capsys)[2]
    assert "not even with --force (choose a new path, or move the file away)" in err
    assert "path=" not in err and "force=" not in err
    assert notes.read_text() == "my notes"


def test_a_refusal_at_write_time_names_the_flag_too(tmp_path):
    from headlab.cli.outputs import writing
    from headlab.results.atomic_files import write_output
    from headlab.results.output_policy import Kind, OutputRefused

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(OutputRefused) as refused_, writing("--figure"):
        write_output(notes, b"png", Kind.png("model-heads"))
    assert str(refused_.value).startswith(f"--figure {notes} exists and headlab did not write it")
    assert "not even with --force" in str(refused_.value)


def test_sweep_plot_names_out_as_its_flag(tmp_path, results, capsys):
    thesis = tmp_path / "thesis.txt"
    thesis.write_text("chapter one")
    argv = ["sweep", "plot", "--results", str(results), "--out", str(thesis)]
    refused(argv, capsys, tmp_path, f"--out {thesis} exists")


def test_a_sweep_keeps_the_users_last_line_even_without_its_newline(tmp_path, results, capsys):
    note = "NOTE: 16-head runs are elsewhere"
    with results.open("a") as f:
        f.write(note)
    before = results.read_text()
    code, _, err = run(["sweep", *TINY_SWEEP, "--out", str(results)], capsys)
    assert code == 0, err
    assert "line 3: not JSON" in err and "torn" not in err
    after = results.read_text()
    assert after.startswith(before + "\n") and after.count(note) == 1
    lines = after.splitlines()
    assert lines[2] == note and json.loads(lines[3])["config"]["num_heads"] == 1  # the new run


def test_a_big_file_that_is_not_results_is_refused_from_its_first_line(tmp_path, capsys):
    big = tmp_path / "big.dat"
    with big.open("wb") as f:
        f.write(b"\x89PNG not results\n")
        f.truncate(256 * 2**20)  # sparse: nothing written but the first bytes
    refused(["sweep", "summary", "--results", str(big)], capsys, tmp_path, "its first line")
    refused(["sweep", *TINY_SWEEP, "--out", str(big)], capsys, tmp_path, "holds no results rows")


@pytest.mark.parametrize("flag", ["--out", "--png"])
def test_report_force_never_replaces_the_folder_holding_its_text_file_or_model(
    tmp_path, capsys, flag
):
    """Every input of a report is protected, not only --results: --text-file, --model PATH."""
    from headlab.report.build import FIGURES_MARKER, MARKER

    marker = MARKER if flag == "--out" else FIGURES_MARKER
    folder = tmp_path / "rep"
    folder.mkdir()
    (folder / marker).write_text("headlab 0.1 report\n")
    essay = folder / "essay.txt"
    essay.write_text("my only copy")
    mine = folder / "sub" / "mymodel"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text("{}")
    other = str(tmp_path / ("r" if flag == "--png" else "figs"))
    base = ["report", "--results", str(tmp_path / "none"), flag, str(folder), "--force"]
    if flag == "--png":
        base += ["--out", other]
    for inputs in (["--text-file", str(essay)], ["--text", "a b", "--model", str(mine)]):
        refused([*base, *inputs], capsys, tmp_path, f"holds an input of the report ({inputs[-1]})")
    assert essay.read_text() == "my only copy" and (mine / "config.json").exists()

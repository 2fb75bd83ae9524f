"""``headlab sweep`` and ``headlab sweep plot`` through the real entry point."""

import pytest

from cli_run import run
from headlab.results.jsonl_store import read_rows

TINY = ["--task", "multi-lookup", "--heads", "1,2", "--d-model", "8", "--seeds", "2"]


def test_sweep_writes_results_prints_the_summary_and_resumes(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *TINY, "--steps", "3", "--workers", "1", "--out", str(out)]
    code, stdout, _ = run(argv, capsys)
    assert code == 0
    assert "4 runs, 0 already finished" in stdout and "4 runs in" in stdout
    finals = [r for r in read_rows(out) if r["final"]]
    assert len(finals) == 4
    params = {r["params"] for r in finals}
    assert len(params) == 1 and str(params.pop()) in stdout  # one count, printed
    assert "± " in stdout and "head entropy" in stdout
    code, stdout, _ = run(argv, capsys)
    assert code == 0 and "4 already finished" in stdout and "0 to run" in stdout
    assert len([r for r in read_rows(out) if r["final"]]) == 4


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--heads", "1,3"], "--d-model 8 is not divisible by --heads 3"),
        (["--kv-heads", "3"], "--heads 1 is not divisible by --kv-heads 3"),
        (["--task", "sorting"], "unknown task 'sorting'"),
        (["--executor", "slurm"], "--executor must be local or ray, got 'slurm'"),
        (["--heads", "1,x"], "--heads takes comma-separated integers"),
    ],
)
def test_bad_sweeps_exit_2_with_one_line_before_training(tmp_path, capsys, extra, message):
    out = tmp_path / "s.jsonl"
    code, stdout, err = run(["sweep", *TINY, *extra, "--steps", "3", "--out", str(out)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("headlab: error:") and message in err
    assert not out.exists() and stdout == ""


def test_plot_writes_a_png_and_missing_results_exit_2(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *TINY, "--steps", "2", "--workers", "1", "--out", str(out)]
    assert run(argv, capsys)[0] == 0
    png = tmp_path / "s.png"
    code, stdout, _ = run(["sweep", "plot", "--results", str(out), "--out", str(png)], capsys)
    assert code == 0 and f"wrote {png}" in stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    code, _, err = run(["sweep", "plot", "--results", str(tmp_path / "no.jsonl")], capsys)
    assert code == 2 and "results file not found" in err
    code, stdout, _ = run(["sweep", "summary", "--results", str(out)], capsys)
    assert code == 0 and "multi-lookup" in stdout
    code, _, err = run(["sweep", "summary", "--results", str(tmp_path / "no.jsonl")], capsys)
    assert code == 2 and "results file not found" in err


def test_ctrl_c_exits_130_and_keeps_the_finished_runs(tmp_path, capsys, monkeypatch):
    import headlab.experiments.sweep as sweep_module

    real = sweep_module.run_sweep

    def interrupted_after_one(plan, **kwargs):
        for result in real(plan, **kwargs):
            yield result
            raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_sweep", interrupted_after_one)
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *TINY, "--steps", "2", "--workers", "1", "--out", str(out)]
    code, _, err = run(argv, capsys)
    assert code == 130 and "interrupted; 1 runs of this session saved" in err
    assert len([r for r in read_rows(out) if r["final"]]) == 1
    monkeypatch.setattr(sweep_module, "run_sweep", real)
    code, stdout, _ = run(argv, capsys)
    assert code == 0 and "1 already finished" in stdout and "3 to run" in stdout

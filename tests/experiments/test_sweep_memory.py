"""A sweep's memory: every run's estimate, refused with it before any run starts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cli_run import run
from headlab import limits
from headlab.analysis.params import parameter_count
from headlab.experiments.run_sizing import make_config, run_memory_estimate, run_parameters
from headlab.experiments.sweep import check_runs_fit
from headlab.experiments.tiny_transformer import TinyTransformer


@pytest.mark.parametrize(
    ("task", "heads", "sizes"),
    [
        ("multi-lookup", 4, {"d_model": 24, "layers": 3}),
        ("recall", 6, {"d_model": 30, "layers": 2, "num_kv_heads": 2, "mlp_ratio": 3}),
        ("induction", 5, {"d_model": 20, "layers": 2, "attention": "talking-heads"}),
        ("induction", 3, {"d_model": 18, "layers": 1, "head_dim": 7}),
    ],
)
def test_the_parameter_count_is_the_built_models(task, heads, sizes):
    config = make_config(task, heads, **sizes)
    assert run_parameters(config) == parameter_count(TinyTransformer(config))


def test_the_issues_sweep_is_refused_before_any_run(tmp_path, capsys, monkeypatch):
    """d_model 16384 x 256 layers grew to 13 GB and ended in an allocator traceback."""
    from headlab.experiments import executors

    monkeypatch.setattr(executors, "run_one", lambda *_: pytest.fail("a run started"))
    argv = [
        "sweep",
        "--out",
        str(tmp_path / "b.jsonl"),
        "--d-model",
        "16384",
        "--layers",
        "256",
        "--heads",
        "1",
        "--seeds",
        "1",
        "--steps",
        "1",
        "--workers",
        "1",
    ]
    start = time.perf_counter()
    code, out, err = run(argv, capsys)
    assert time.perf_counter() - start < 5 and out == ""
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "1 run(s) at once of --d-model 16384, --layers 256, 1 head" in err
    assert "needs about" in err and "lower --d-model 16384, --layers 256 or --workers 1" in err
    assert not (tmp_path / "b.jsonl").exists()


def test_workers_multiply_the_estimate(monkeypatch):
    configs = [make_config("recall", 8, d_model=256, layers=4, seed=s) for s in range(3)]
    one = run_memory_estimate(configs[0])
    monkeypatch.setattr(limits, "machine_memory", lambda: int(2 * 1.5 * one))  # fits 1.5 runs
    check_runs_fit(configs, workers=1)
    with pytest.raises(ValueError, match=r"2 run\(s\) at once of d_model=256, layers=4, 8 heads"):
        check_runs_fit(configs, workers=2)
    check_runs_fit(configs, executor="ray", workers=2)  # Ray's machines are not this one
    check_runs_fit(configs[:1], workers=2)  # one run: one worker busy


PROBE = """
import re, sys
from headlab.experiments.run_sizing import make_config, run_memory_estimate
from headlab.experiments.train import run_one

def status(key):
    text = open("/proc/self/status").read()
    return int(re.search(key + r":\\s+(\\d+)", text).group(1)) * 1024

config = make_config(sys.argv[1], int(sys.argv[2]), d_model=int(sys.argv[3]),
                     layers=int(sys.argv[4]), steps=2)
base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the present
run_one(config)
print(status("VmHWM") - base, run_memory_estimate(config))
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="/proc")
@pytest.mark.parametrize("run_args", [("multi-lookup", 8, 512, 3), ("recall", 16, 64, 6)])
def test_the_estimate_covers_a_measured_run(run_args):
    """Peak resident growth of a run in a fresh process: never above the estimate, and not
    far below it (docs/experiments.md, Memory)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, run_args)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    measured, estimate = map(int, out.split())
    assert measured <= estimate <= 1.8 * measured, (measured, estimate)

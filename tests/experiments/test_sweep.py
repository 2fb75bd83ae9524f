"""Sweeps end to end on the local pool: validation first, resume, parameter counts, the plot."""

import pytest

from headlab.experiments import sweep as sweep_module
from headlab.experiments.sweep import SweepRequest, expand_grid, plan_sweep, run_sweep
from headlab.report.figure_files import plot_sweep
from headlab.results.jsonl_store import read_rows
from headlab.results.sweep_summary import plot_series, summarize

TINY = {"eval_size": 32, "batch_size": 8}


def tiny_spec(**kwargs):
    base = {"task": "multi-lookup", "heads": (1, 2, 4), "d_model": 8, "seeds": 2, "steps": 3}
    return SweepRequest(**{**base, **kwargs, "training": TINY})


@pytest.mark.parametrize("workers", [1, 2])
def test_tiny_sweep_runs_end_to_end_and_resumes(tmp_path, workers):
    out = tmp_path / "sweep.jsonl"
    plan = plan_sweep(tiny_spec(), out)
    assert (len(plan.configs), plan.skipped) == (6, 0)
    results = list(run_sweep(plan, workers=workers))
    assert sorted(r.config.run_id for r in results) == sorted(c.run_id for c in plan.configs)
    rows = read_rows(out)
    assert {r["run_id"] for r in rows if r["final"]} == {c.run_id for c in plan.configs}
    for row in rows:
        assert set(row) >= {"run_id", "config", "step", "loss", "accuracy", "final", "params"}
        assert row["config"]["num_heads"] in (1, 2, 4) and row["config"]["d_model"] == 8
    # resume: everything is finished, nothing runs again
    again = plan_sweep(tiny_spec(), out)
    assert (again.skipped, again.todo) == (6, [])
    assert list(run_sweep(again, workers=workers)) == []
    # one more seed: only the new runs are to do
    more = plan_sweep(tiny_spec(seeds=3), out)
    assert (more.skipped, len(more.todo)) == (6, 3)


def test_summary_has_equal_params_across_head_counts_and_one_row_per_head_count(tmp_path):
    out = tmp_path / "sweep.jsonl"
    list(run_sweep(plan_sweep(tiny_spec(heads=(1, 2, 4, 8)), out)))
    summary = summarize(read_rows(out))
    assert [s.num_heads for s in summary] == [1, 2, 4, 8]
    assert len({s.params for s in summary}) == 1
    assert all(s.seeds == 2 and s.entropy_mean is not None for s in summary)
    png = plot_sweep(out, tmp_path / "fig" / "sweep.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"heads": (1, 3)}, "^d_model=8 is not divisible by heads=3"),
        ({"heads": (4,), "kv_heads": (3,)}, "^heads=4 is not divisible by kv_heads=3$"),
        ({"task": "sorting"}, "unknown task 'sorting'"),
        ({"seeds": 0}, "^seeds must be between 1 and 10000, got 0$"),
    ],
)
def test_bad_configs_are_rejected_before_any_training(tmp_path, monkeypatch, kwargs, match):
    def no_training(*args, **kw):
        raise AssertionError("training started")

    monkeypatch.setattr(sweep_module, "execute", no_training)
    out = tmp_path / "sweep.jsonl"
    with pytest.raises(ValueError, match=match):
        list(run_sweep(plan_sweep(tiny_spec(**kwargs), out)))
    assert not out.exists()


def test_free_head_dim_changes_parameters_and_is_recorded():
    configs = expand_grid(tiny_spec(heads=(1, 3), head_dim=5, seeds=1))
    assert [(c.num_heads, c.head_dim) for c in configs] == [(1, 5), (3, 5)]


def test_plot_draws_one_line_per_kv_setting_across_head_counts(tmp_path):
    out = tmp_path / "sweep.jsonl"
    spec = tiny_spec(heads=(2, 4), kv_heads=(1, 2), seeds=1)
    list(run_sweep(plan_sweep(spec, out)))
    series = plot_series(summarize(read_rows(out)), "multi-lookup")
    # (h=2, G=1) and (h=4, G=1) are one MQA line; (h=2, G=2) is full MHA; (h=4, G=2) is GQA.
    lines = {kv: [r.num_heads for r in rows] for kv, rows in series.items()}
    assert lines == {1: [2, 4], None: [2], 2: [4]}

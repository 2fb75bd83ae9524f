"""The Ray executor on a local Ray instance started (and shut down) by the test."""

import pytest

pytest.importorskip("ray")

from headlab.experiments.sweep import SweepRequest, plan_sweep, run_sweep
from headlab.results.jsonl_store import read_rows

pytestmark = [
    pytest.mark.slow,
    # Ray's own start-up chatter, nothing of ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning:ray.*"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


def test_tiny_sweep_on_ray_matches_the_local_pool(tmp_path, local_ray):
    spec = SweepRequest(
        task="multi-lookup",
        heads=(1, 2),
        d_model=8,
        seeds=1,
        steps=3,
        training={"eval_size": 32, "batch_size": 8},
    )
    on_ray, local = tmp_path / "ray.jsonl", tmp_path / "local.jsonl"
    results = list(run_sweep(plan_sweep(spec, on_ray), executor="ray"))
    assert len(results) == 2
    list(run_sweep(plan_sweep(spec, local), executor="local"))

    def finals(path):
        return {r["run_id"]: (r["loss"], r["accuracy"]) for r in read_rows(path) if r["final"]}

    assert finals(on_ray) == finals(local)  # a run is a pure function of its config
    assert plan_sweep(spec, on_ray).skipped == 2

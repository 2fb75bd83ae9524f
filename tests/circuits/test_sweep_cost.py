"""The patching sweep's cost, known before the model loads (``circuits/sweep_cost.py``):

- one layer's FLOPs equal what torch's own FLOP counter counts in transformers' Llama layer (eager
  attention): its products exactly, the scores and weighted values at the causal half of the
  whole square the counter counts;
- the sweep's runs and layer-runs equal what ``head_patching`` runs and reports as progress (a
  tiny Llama, with and without by-position); the progress rises with the work to its total;
- a by-position sweep past the limit is refused with the estimate; the sweep of whole nodes is
  never refused for its time.
"""

from __future__ import annotations

import pytest
import torch
from hf_families import build
from node_reference import task

from headlab.circuits.fits import _shape
from headlab.circuits.head_patching import head_patching
from headlab.circuits.sweep_cost import (
    SWEEP_LIMIT_S,
    check_sweep,
    layer_flops,
    sweep_cost,
    sweep_flops,
)
from headlab.models.hf import attach

SMOLLM2 = {  # SmolLM2-135M's config, as _shape reads it
    "layers": 30,
    "width": 576,
    "heads": 9,
    "kv_heads": 3,
    "head_dim": 64,
    "mlp": 1536,
    "vocab": 49152,
}


def test_a_layers_flops_are_torchs_count():
    from torch.utils.flop_counter import FlopCounterMode

    batch, pos = 3, 11
    llama = build("llama")
    llama.set_attn_implementation("eager")  # products torch's counter sees (not CPU SDPA's)
    shape = _shape(llama.config)
    layer, body = llama.model.layers[0], llama.model
    hidden = torch.randn(batch, pos, shape["width"])
    position_ids = torch.arange(pos)[None]
    rotary = body.rotary_emb(hidden, position_ids)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        layer(hidden, position_embeddings=rotary, position_ids=position_ids)
    by_op = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    attention = sum(n for op, n in by_op.items() if "bmm" in op)  # scores, weighted values
    products = counter.get_total_flops() - attention
    assert attention > 0 and products > 0
    assert layer_flops(shape, batch, pos) == pytest.approx(
        products + attention * (pos + 1) / (2 * pos), rel=1e-12
    )


@pytest.mark.parametrize("by_position", [False, True])
def test_the_runs_and_the_progress_are_the_sweeps(by_position):
    clean, corrupted, _, metric = task()
    model = attach(build("llama"), announce=False)
    seen: list[tuple[int, int]] = []
    found = head_patching(
        model,
        clean,
        corrupted,
        metric,
        by_position=by_position,
        chunk=7,
        progress=lambda done, total: seen.append((done, total)),
    )
    cost = sweep_flops(_shape(model.model.config), *clean.shape, by_position)
    places = 1 + (clean.shape[1] if by_position else 0)
    assert cost.units == len(found.nodes) and cost.runs == len(found.nodes) * places
    assert {total for _, total in seen} == {cost.layer_runs}
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == cost.layer_runs and len(set(done)) == len(done)


def test_a_by_position_sweep_past_the_limit_is_refused_with_the_estimate():
    slow = sweep_cost(SMOLLM2, 6, 65, by_position=True, rate=1e9)
    assert slow.seconds > SWEEP_LIMIT_S and slow.places == 66
    refused = r"by_position must fit in 30 min: head-patching 390 nodes x 66 places"
    with pytest.raises(ValueError, match=refused):
        check_sweep(slow)
    whole = sweep_cost(SMOLLM2, 6, 65, by_position=False, rate=1e9)
    assert whole.places == 1 and whole.runs == 390
    assert whole.forwards == pytest.approx(slow.forwards / 66)
    check_sweep(whole)  # the sweep of whole nodes: never refused for its time
    check_sweep(sweep_cost(SMOLLM2, 1, 8, by_position=True, rate=1e11))


def test_the_rate_is_measured_when_not_given():
    cost = sweep_cost(SMOLLM2, 1, 8, by_position=True)
    assert cost.rate > 1e6 and cost.seconds > 0 and "GFLOP/s" in cost.says()

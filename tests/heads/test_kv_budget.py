"""A KV plan runs the model exactly as planned: against the same keys hidden by hand."""

from __future__ import annotations

import pytest
import torch

from headlab.attention.interventions import intervene
from headlab.heads.kv_budget import KVPlan, check_budgets, evaluate, planned
from headlab.heads.repeats import copy_sources

TEXT = " ".join(f"t{(13 * i) % 97}" for i in range(25))


def test_a_plan_equals_hiding_the_keys_by_hand(tiny_llama):
    batch = tiny_llama.tokenize([TEXT])
    n = batch.input_ids.shape[1]
    plan = KVPlan(((0, 1), (2, 0)), sinks=2, window=5)
    with torch.no_grad(), planned(tiny_llama, plan):
        got = tiny_llama.run(batch)
    assert all(layer.sites.budget is None for layer in tiny_llama.attention_layers())
    positions = torch.arange(n)
    offset = positions[:, None] - positions[None, :]
    outside = (offset >= 5) & (positions[None, :] >= 2)  # (q, k): beyond sinks and window

    def hide(heads):
        def edit(scores):  # (batch, head, q, k): the planned heads lose the far keys
            scores = scores.clone()
            scores[:, heads] = scores[:, heads].masked_fill(outside, float("-inf"))
            return scores

        return edit

    layers = tiny_llama.attention_layers()
    first, third = hide([3, 4, 5]), hide([0, 1, 2])
    with (
        torch.no_grad(),
        intervene(layers[0], "scores", first),
        intervene(layers[2], "scores", third),
    ):
        want = tiny_llama.run(batch)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        plain = tiny_llama.run(batch)
    assert (plain - got).abs().max() > 1e-4  # the plan changed something


def test_kv_saved_and_refusals(tiny_llama):
    plan = KVPlan(((0, 0), (1, 1), (2, 0)), sinks=4, window=6)
    # 6 groups x 100 tokens in full; 3 of them keep 10
    assert plan.kv_saved([2, 2, 2], 100) == pytest.approx(600 / (600 - 3 * 90))
    assert KVPlan((), 4, 6).kv_saved([2, 2, 2], 100) == 1.0
    with (
        pytest.raises(ValueError, match=r"plan: K/V group 1\.2 is not in the model"),
        planned(tiny_llama, KVPlan(((1, 2),))),
    ):
        pass
    for bad in ((), (0.0,), (1.5,), (True,)):
        with pytest.raises(ValueError, match="budgets"):
            check_budgets(bad)


def test_evaluate_by_hand(tiny_llama):
    passage = " ".join(f"t{i}" for i in range(40, 52))
    text = f"t1 {passage} t2 t3 t4 {passage}"
    batch = tiny_llama.tokenize([text])
    sources = copy_sources(batch.input_ids[0])
    result = evaluate(tiny_llama, batch, sources)
    with torch.no_grad():
        logits = tiny_llama.run(batch)[0, :-1]
    targets = batch.input_ids[0, 1:]
    copies = sources[:-1] >= 0
    losses = torch.nn.functional.cross_entropy(logits.double(), targets, reduction="none")
    assert result.perplexity == pytest.approx(float(losses[~copies].mean().exp()))
    hits = (logits[copies].argmax(-1) == targets[copies]).double().mean()
    assert result.copy_accuracy == pytest.approx(float(hits))
    assert int(copies.sum()) == 12 - 6

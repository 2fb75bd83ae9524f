"""Physical pruning equals masking; parameter counts fall by exactly the removed rows/columns."""

from __future__ import annotations

import copy

import pytest
import torch

from headlab.heads import prune_curve, prune_heads
from headlab.models.head_mask import as_mask
from headlab.models.hf import attach

TEXTS = [
    "Pruned heads must leave nothing behind.",
    "A longer text gives the attention more positions to look at, with commas.",
    "short",
    "Ünïcödé and punctuation?!",
]


def embed(model, texts, head_mask=None):
    with torch.no_grad():
        return model.run(model.tokenize(texts), head_mask)


@pytest.mark.parametrize(
    "removed", [{0: [1]}, {0: [0, 2], 1: [1]}, {1: [0, 1, 2]}, {0: [0, 1, 2], 1: [2]}]
)
def test_pruned_equals_masked(tiny, removed):
    pruned = prune_heads(tiny, removed)
    masked = embed(tiny, TEXTS, as_mask(tiny, removed))
    torch.testing.assert_close(embed(pruned, TEXTS), masked, rtol=1e-5, atol=1e-6)
    assert pruned.heads_per_layer == [3 - len(removed.get(i, [])) for i in range(2)]
    # Each head has D=5 rows in each of Q, K, V (+ biases) and 5 columns of W_O.
    n = sum(map(len, removed.values()))
    assert tiny.parameter_count() - pruned.parameter_count() == n * (3 * 5 * 16 + 5 * 15)
    # The original is untouched.
    assert tiny.heads_per_layer == [3, 3]


def test_a_layer_without_heads_adds_only_the_output_bias(tiny):
    """Every head of layer 1 removed: its attention block adds W_O's bias alone, so the model
    equals one whose layer-1 W_O is zero."""
    pruned = prune_heads(tiny, {1: [0, 1, 2]})
    assert pruned.heads_per_layer == [3, 0] and pruned.kv_heads_per_layer == [3, 0]
    dense = copy.deepcopy(tiny.model)
    with torch.no_grad():
        dense.encoder.layer[1].attention.output.dense.weight.zero_()
    silent = attach(dense)
    silent.pooling = tiny.pooling
    silent.tokenizer = tiny.tokenizer
    torch.testing.assert_close(embed(pruned, TEXTS), embed(silent, TEXTS), rtol=1e-5, atol=1e-6)


def test_pruned_trace_matches_masked_trace(tiny):
    removed = {0: [2]}
    batch = tiny.tokenize(TEXTS[1:2])
    _, pruned = prune_heads(tiny, removed).trace_batch(batch)
    _, masked = tiny.trace_batch(batch, head_mask=as_mask(tiny, removed))
    torch.testing.assert_close(pruned[0].weights, masked[0].weights[:, :2])
    torch.testing.assert_close(pruned[1].output, masked[1].output, rtol=1e-5, atol=1e-6)


def test_bad_indices(tiny):
    with pytest.raises(ValueError, match=r"head indices must be in \[0, 3\), got \[3\]"):
        prune_heads(tiny, {0: [3]})
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\), got 2"):
        prune_heads(tiny, {2: [0]})


def test_prune_curve_on_tiny(tiny):
    ranking = [(l, h) for l in range(2) for h in range(3)]
    result = prune_curve(tiny, TEXTS, ranking, fractions=(0.0, 0.5, 1.0), latency_repeats=1)
    steps = result.to_dict()["steps"]
    assert [(s["order"], s["heads_pruned"]) for s in steps] == [
        ("importance", 0),
        ("importance", 3),
        ("importance", 6),
        ("random", 0),
        ("random", 3),
        ("random", 6),
    ]
    assert steps[0]["mean_cosine"] == pytest.approx(1.0) and steps[0]["nn_agreement"] == 1.0
    assert steps[0]["params"] > steps[1]["params"] > steps[2]["params"] == steps[5]["params"]
    assert steps[2]["mean_cosine"] == pytest.approx(steps[5]["mean_cosine"])
    with pytest.raises(ValueError, match="each of the 6"):
        prune_curve(tiny, TEXTS, ranking[:-1])


@pytest.mark.model
def test_pruned_equals_masked_on_minilm(minilm):
    removed = {0: [3, 7], 2: list(range(12)), 5: [0, 11]}
    texts = [*TEXTS, "The library reads model weights from safetensors files."]
    batch = minilm.tokenize(texts)
    with torch.no_grad():
        masked = minilm.run(batch, head_mask=as_mask(minilm, removed))
        pruned = prune_heads(minilm, removed).run(batch)
    torch.testing.assert_close(pruned, masked, rtol=1e-4, atol=1e-5)


def test_prune_by_importance_is_importance_then_the_curve(tiny):
    from headlab.heads import head_importance, prune_by_importance

    seen = []
    fractions = (0.0, 0.5)
    result = prune_by_importance(
        tiny, TEXTS, seed=4, fractions=fractions, on_step=lambda *step: seen.append(step)
    )
    ranking = head_importance(tiny, TEXTS).ranking()
    expected = prune_curve(tiny, TEXTS, ranking, fractions=fractions, seed=4, latency_repeats=1)
    for got, want in zip(result.steps, expected.steps, strict=True):
        assert (got.order, got.heads_pruned, got.params) == (
            want.order,
            want.heads_pruned,
            want.params,
        )
        assert got.measures == pytest.approx(want.measures)
    assert seen == [(i, 5) for i in range(1, 6)]

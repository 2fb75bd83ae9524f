"""Ablating heads of a model: zero equals the head mask, mean uses the traced mean over real
tokens, errors name the bad head."""

from __future__ import annotations

import pytest
import torch

from headlab.heads.ablation import (
    ablated,
    ablation_effect,
    mean_objective,
    parse_heads,
    reference_means,
)
from headlab.heads.importance import even_batches

TEXTS = [
    "the first text is about attention heads and masks",
    "a second text describes how the tokenizer splits words",
    "the third one mentions pruning rows and columns",
    "finally a fourth text with punctuation!",
    "one more sentence so that batches have several rows",
]


def test_parse_heads():
    assert parse_heads("3.5,4.1") == [(3, 5), (4, 1)]
    assert parse_heads(" 0.0 ") == [(0, 0)]
    for bad in ("3", "3.x", "3.5;4.1", "-1.2", ""):
        with pytest.raises(ValueError, match=r"LAYER\.HEAD"):
            parse_heads(bad)


def _masked_objective(model, texts, heads, batch_size):
    """The reference: the same batches with head_mask 0 on the heads (no interventions)."""
    mask = [torch.ones(h) for h in model.heads_per_layer]
    for layer, head in heads:
        mask[layer][head] = 0.0
    batches = even_batches(len(texts), batch_size)
    with torch.no_grad():
        values = [float(model.objective([texts[i] for i in b], mask, 16)) for b in batches]
    return sum(values) / len(values)


@pytest.mark.parametrize("fixture", ["tiny", "tiny_llama"])
def test_zero_ablation_equals_head_mask_zero(fixture, request):
    model = request.getfixturevalue(fixture)
    heads = [(0, 1), (1, 2)]
    result = ablation_effect(model, TEXTS, heads, batch_size=3, max_length=16)
    assert result.baseline == pytest.approx(
        mean_objective(model, TEXTS, batch_size=3, max_length=16)
    )
    assert result.ablated == pytest.approx(_masked_objective(model, TEXTS, heads, 3), rel=1e-5)
    assert result.ablated != pytest.approx(result.baseline)
    assert result.to_dict()["heads"] == [[0, 1], [1, 2]]
    assert not any(a.sites for a in model.attention_layers())


def test_reference_means_equal_the_traced_mean_over_real_tokens(tiny):
    batch = tiny.tokenize(TEXTS, 16)
    _, traces = tiny.trace_batch(batch)
    real = batch.attention_mask[:, None, :, None]  # (batch, 1, pos, 1)
    expected = (traces[1].head_outputs * real).sum(dim=(0, 2)) / batch.attention_mask.sum()
    means = reference_means(tiny, [1], TEXTS, batch_size=2, max_length=16)
    torch.testing.assert_close(means[1], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["mean", "resample"])
def test_other_modes_change_the_objective_and_leave_the_model_as_it_was(tiny, mode):
    before = mean_objective(tiny, TEXTS, batch_size=5, max_length=16)
    result = ablation_effect(tiny, TEXTS, [(1, 0)], mode=mode, batch_size=5, max_length=16)
    assert result.baseline == pytest.approx(before)
    assert result.ablated != pytest.approx(before)
    assert mean_objective(tiny, TEXTS, batch_size=5, max_length=16) == pytest.approx(before)


@pytest.mark.parametrize(
    ("heads", "match"),
    [
        ([(2, 0)], r"^heads 2\.0: layer 2 out of range, expected 0 to 1 \("),
        ([(0, 3)], r"^heads 0\.3: head 3 out of range in layer 0, expected 0 to 2 \(it has 3"),
        ([], "at least one"),
    ],
)
def test_bad_heads(tiny, heads, match):
    with pytest.raises(ValueError, match=match), ablated(tiny, heads):
        pass


def test_a_bad_mode_is_refused_before_any_work():
    from headlab.heads.requests import check_mode

    for mode in ("zero", "mean", "resample"):
        check_mode(mode)
    with pytest.raises(ValueError, match="mode must be zero, mean or resample, got 'half'"):
        check_mode("half")

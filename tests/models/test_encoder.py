"""The hand-built reference encoder on a tiny random BERT: pooling, padding, trace, head views
and masks."""

from __future__ import annotations

import math

import pytest
import torch


@pytest.fixture
def tiny(tiny_reference):
    """Here ``tiny`` is the hand-built reference encoder (tests/conftest.py's tiny_reference)."""
    return tiny_reference


TEXTS = [
    "A short one.",
    "A considerably longer sentence, with commas, numbers like 3.14 and several clauses in it.",
    "Ünïcödé: naïve café — 日本語!",
    "mid length text here",
    "x",
]


def test_embed_shape_and_unit_norm(tiny):
    emb = tiny.embed(TEXTS, batch_size=2)
    assert emb.shape == (5, 15)
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(5))


def test_batching_and_padding_do_not_change_embeddings(tiny):
    together = tiny.embed(TEXTS, batch_size=5)
    alone = torch.cat([tiny.embed([t]) for t in TEXTS])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)


def test_mean_pooling_by_hand(tiny):
    batch = tiny.tokenize(TEXTS[1:2])
    with torch.no_grad():
        states = tiny.model(batch.input_ids, batch.token_type_ids, batch.attention_mask)
    mean = states[0].mean(dim=0)
    torch.testing.assert_close(tiny.embed(TEXTS[1:2])[0], mean / mean.norm())


def test_truncation_to_max_positions(tiny):
    batch = tiny.tokenize(["word " * 100], max_length=37)
    assert batch.input_ids.shape == (1, 37)
    assert batch.tokens[0][0] == "[CLS]" and batch.tokens[0][-1] == "[SEP]"


def test_trace_matches_fused_forward(tiny):
    tr = tiny.trace(TEXTS[1])
    batch = tiny.tokenize(TEXTS[1:2])
    assert len(tr.layers) == 2 and len(tr.tokens) == batch.input_ids.shape[1]
    w = tr.layers[0].weights
    assert w.shape == (1, 3, len(tr.tokens), len(tr.tokens))
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 3, len(tr.tokens)))
    with torch.no_grad():
        fused = tiny.model(batch.input_ids, batch.token_type_ids, batch.attention_mask)
        explicit, _ = tiny.model.trace(batch.input_ids, batch.token_type_ids, batch.attention_mask)
    torch.testing.assert_close(explicit, fused, rtol=1e-5, atol=1e-5)


def test_with_num_heads_original_count_is_exact_and_shares_parameters(tiny):
    same = tiny.with_num_heads(3)
    assert torch.equal(same.embed(TEXTS), tiny.embed(TEXTS))
    one = tiny.with_num_heads(1, [1])
    assert one.heads_per_layer == [3, 1]
    view, base = one.model.layers[1].attention, tiny.model.layers[1].attention
    assert view.in_proj_weight is base.in_proj_weight
    assert not torch.allclose(one.embed(TEXTS), tiny.embed(TEXTS))
    with pytest.raises(ValueError, match="not divisible by num_heads=2"):
        tiny.with_num_heads(2)
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\), got 5"):
        tiny.with_num_heads(1, [5])


def test_head_mask_of_ones_changes_nothing_and_zero_mask_changes(tiny):
    ones = torch.ones(2, 3)
    torch.testing.assert_close(tiny.embed(TEXTS, head_mask=ones), tiny.embed(TEXTS))
    zero_one = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    assert not torch.allclose(tiny.embed(TEXTS, head_mask=zero_one), tiny.embed(TEXTS))
    with pytest.raises(ValueError, match="one entry per layer"):
        tiny.embed(TEXTS, head_mask=torch.ones(3, 3))


def test_trace_head_mask_zeroes_that_head(tiny):
    mask = [torch.tensor([1.0, 0.0, 1.0]), None]
    tr = tiny.trace(TEXTS[0], head_mask=mask)
    assert tr.layers[0].head_outputs[:, 1].abs().max() == 0
    assert tr.layers[0].contributions[:, 1].abs().max() == 0
    assert math.isfinite(tr.layers[1].weights.sum().item())

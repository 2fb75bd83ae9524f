"""An encoder on the production route, on a tiny random BERT: pooling, padding, truncation,
trace, head views and masks."""

from __future__ import annotations

import math

import pytest
import torch

TEXTS = [
    "A short one.",
    "A considerably longer sentence, with commas, numbers like 3.14 and several clauses in it.",
    "Ünïcödé: naïve café — 日本語!",
    "mid length text here",
    "x",
]


def embed(model, texts, head_mask=None):
    with torch.no_grad():
        return model.run(model.tokenize(texts), head_mask)


def test_embed_shape_and_unit_norm(tiny):
    emb = embed(tiny, TEXTS)
    assert emb.shape == (5, 15)
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(5))


def test_batching_and_padding_do_not_change_embeddings(tiny):
    together = embed(tiny, TEXTS)
    alone = torch.cat([embed(tiny, [t]) for t in TEXTS])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)


def test_mean_pooling_by_hand(tiny):
    batch = tiny.tokenize(TEXTS[1:2])
    with torch.no_grad():
        states = tiny.model(batch.input_ids, batch.attention_mask.long()).last_hidden_state
    mean = states[0].mean(dim=0)
    torch.testing.assert_close(embed(tiny, TEXTS[1:2])[0], mean / mean.norm())


def test_truncation_to_max_positions(tiny):
    batch = tiny.tokenize(["word " * 100], max_length=37)
    assert batch.input_ids.shape == (1, 37)
    assert batch.tokens[0][0] == "[CLS]" and batch.tokens[0][-1] == "[SEP]"


def test_trace_matches_the_forward(tiny):
    batch = tiny.tokenize(TEXTS[1:2])
    output, traces = tiny.trace_batch(batch)
    n = batch.input_ids.shape[1]
    assert len(traces) == 2 and len(batch.tokens[0]) == n
    w = traces[0].weights
    assert w.shape == (1, 3, n, n)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 3, n))
    torch.testing.assert_close(output, embed(tiny, TEXTS[1:2]), rtol=1e-5, atol=1e-5)


def test_a_head_view_of_the_original_count_is_the_model_and_shares_parameters(tiny):
    same = tiny.with_head_view(3)
    assert torch.equal(embed(same, TEXTS), embed(tiny, TEXTS))
    one = tiny.with_head_view(1, [1])
    assert one.heads_per_layer == [3, 1]
    assert {id(p) for p in one.parameters()} == {id(p) for p in tiny.parameters()}
    assert not torch.allclose(embed(one, TEXTS), embed(tiny, TEXTS))
    with pytest.raises(ValueError, match="num_heads must divide the 3 query heads"):
        tiny.with_head_view(2)
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\), got 5"):
        tiny.with_head_view(1, [5])


def test_head_mask_of_ones_changes_nothing_and_zero_mask_changes(tiny):
    ones = torch.ones(2, 3)
    torch.testing.assert_close(embed(tiny, TEXTS, ones), embed(tiny, TEXTS))
    zero_one = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    assert not torch.allclose(embed(tiny, TEXTS, zero_one), embed(tiny, TEXTS))
    with pytest.raises(ValueError, match="one entry per layer"):
        embed(tiny, TEXTS, torch.ones(3, 3))


def test_trace_head_mask_zeroes_that_head(tiny):
    mask = [torch.tensor([1.0, 0.0, 1.0]), None]
    _, traces = tiny.trace_batch(tiny.tokenize(TEXTS[:1]), head_mask=mask)
    assert traces[0].head_outputs[:, 1].abs().max() == 0
    assert traces[0].contributions[:, 1].abs().max() == 0
    assert math.isfinite(traces[1].weights.sum().item())


@pytest.mark.parametrize("batch_size", [1, 2, 3, 7])
def test_embed_batches_longest_first_and_returns_the_given_order(tiny, batch_size):
    """``embed`` (sentence-transformers' ``encode``: batches by length) equals each text run alone,
    row for row in the order given, with and without a head mask."""
    texts = [TEXTS[i] for i in (4, 0, 2, 1, 3)]  # lengths out of order
    alone = torch.cat([embed(tiny, [t]) for t in texts])
    torch.testing.assert_close(tiny.embed(texts, batch_size), alone, rtol=1e-5, atol=1e-6)
    mask = torch.ones(tiny.num_layers, tiny.heads_per_layer[0])
    mask[0, 1] = 0.0
    masked = torch.cat([embed(tiny, [t], head_mask=mask) for t in texts])
    torch.testing.assert_close(
        tiny.embed(texts, batch_size, head_mask=mask), masked, rtol=1e-5, atol=1e-6
    )
    assert not torch.allclose(masked, alone)


def test_embed_refuses_a_batch_size_below_one_and_embeds_no_text(tiny):
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        tiny.embed(TEXTS, 0)
    assert tiny.embed([]).shape == (0, 15)

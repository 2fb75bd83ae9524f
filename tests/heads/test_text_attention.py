"""One text's attention in every layer and head, against the model's own traces recomputed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlab.heads.text_attention import (
    collapsed_text_attention,
    text_attention,
)


def words(n: int) -> str:
    return " ".join(f"t{(7 * i) % 97}" for i in range(n))


def test_llama_weights_are_the_causal_softmax_of_q_and_k(tiny_llama):
    result = text_attention(tiny_llama, words(11))
    batch = tiny_llama.tokenize([words(11)])
    with torch.no_grad():
        _, traces = tiny_llama.trace_batch(batch)
    assert result.tokens == batch.tokens[0] and not result.cut
    assert len(result.layers) == 3
    for got, trace in zip(result.layers, traces, strict=True):
        # Independent of the module's softmax: from the rotated q and k of the trace.
        q, k = trace.q[0].double(), trace.k[0].double().repeat_interleave(3, dim=0)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
        np.testing.assert_allclose(got, scores.softmax(-1).numpy(), atol=1e-5)
        assert got.shape == (6, 11, 11)


def test_a_long_text_is_cut_and_says_so(tiny_llama):
    result = text_attention(tiny_llama, words(40), max_tokens=13)
    assert len(result.tokens) == 13 and result.text_tokens == 40 and result.cut
    assert result.layers[0].shape == (6, 13, 13)


def test_encoder_collapsed_view_has_one_head_of_the_same_weights(tiny):
    text = "the cat sat on the mat"
    full = text_attention(tiny, text)
    one = collapsed_text_attention(tiny, text)
    assert one is not None and one.tokens == full.tokens
    assert [w.shape[0] for w in full.layers] == [3, 3]
    assert [w.shape[0] for w in one.layers] == [1, 1]
    np.testing.assert_allclose(one.layers[0].sum(-1), 1.0, atol=1e-6)
    # Layer 0 sees the same input in both views; one head of 15 is not the mean of 3 of 5.
    assert not np.allclose(one.layers[0][0], full.layers[0].mean(0), atol=1e-3)


def test_a_decoder_with_grouped_heads_has_no_collapsed_view(tiny_llama):
    assert collapsed_text_attention(tiny_llama, words(5)) is None


@pytest.mark.parametrize("max_tokens", [1, 0, 10_000])
def test_max_tokens_out_of_range_is_refused(tiny_llama, max_tokens):
    with pytest.raises(ValueError, match="max_tokens"):
        text_attention(tiny_llama, words(5), max_tokens=max_tokens)


def test_empty_text_is_refused(tiny_llama):
    with pytest.raises(ValueError, match="empty text"):
        text_attention(tiny_llama, "   ")

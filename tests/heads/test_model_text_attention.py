"""One text's attention in every layer and head, against the model's own q and k recomputed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlab.heads.model_text_attention import model_text_attention


def words(n: int) -> str:
    return " ".join(f"t{(7 * i) % 97}" for i in range(n))


def test_llama_weights_are_the_causal_softmax_of_q_and_k(tiny_llama):
    result = model_text_attention(tiny_llama, words(11))
    batch = tiny_llama.tokenize([words(11)])
    with torch.no_grad():
        _, traces = tiny_llama.trace_batch(batch)
    assert result.tokens == batch.tokens[0] and not result.cut
    # Every model has the one-head view now (the kernel's head view, also with grouped K/V heads
    # and rotary positions): checked against the rotated q and k below.
    assert [v.name for v in result.views] == ["6 heads", "1 head, same weights"]
    weights = result.views[0].weights
    assert weights.shape == (3, 6, 11, 11)  # (layer, head, q_pos, k_pos)
    for got, trace in zip(weights, traces, strict=True):
        # Independent of the module's softmax: from the rotated q and k of the trace.
        q, k = trace.q[0].double(), trace.k[0].double().repeat_interleave(3, dim=0)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        scores = scores.masked_fill(torch.ones(11, 11).triu(1).bool(), float("-inf"))
        np.testing.assert_allclose(got, scores.softmax(-1).numpy(), atol=1e-5)
    # Layer 0 of the one-head view (the later layers' inputs are the viewed model's own): the
    # sum of the six heads' scores / sqrt(6), one causal softmax.
    q, k = traces[0].q[0].double(), traces[0].k[0].double().repeat_interleave(3, dim=0)
    merged = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).sum(0) / 6**0.5
    merged = merged.masked_fill(torch.ones(11, 11).triu(1).bool(), float("-inf"))
    np.testing.assert_allclose(result.views[1].weights[0, 0], merged.softmax(-1), atol=1e-5)


def test_a_long_text_is_cut_and_says_so(tiny_llama):
    result = model_text_attention(tiny_llama, words(40), max_tokens=13)
    assert len(result.tokens) == 13 and result.total_tokens == 40 and result.cut
    assert result.views[0].weights.shape == (3, 6, 13, 13)


def test_encoder_one_head_view_is_the_same_weights_as_one_head(tiny):
    text = "the cat sat on the mat"
    result = model_text_attention(tiny, text)
    full, one = result.views
    assert (full.name, one.name) == ("3 heads", "1 head, same weights")
    assert full.weights.shape[:2] == (2, 3) and one.weights.shape[:2] == (2, 1)
    # Layer 0 of the one-head view is one softmax over all 15 dims of the same parameters.
    single = tiny.with_head_view(1)
    with torch.no_grad():
        _, traces = single.trace_batch(tiny.tokenize([text]))
    np.testing.assert_allclose(one.weights[0, 0], traces[0].weights[0, 0].double(), atol=1e-6)
    assert not np.allclose(one.weights[0, 0], full.weights[0].mean(0), atol=1e-3)


@pytest.mark.parametrize("max_tokens", [1, 0, 10_000])
def test_max_tokens_out_of_range_is_refused(tiny_llama, max_tokens):
    with pytest.raises(ValueError, match="max_tokens"):
        model_text_attention(tiny_llama, words(5), max_tokens=max_tokens)


def test_empty_text_is_refused(tiny_llama):
    with pytest.raises(ValueError, match="empty text"):
        model_text_attention(tiny_llama, "   ")


def test_a_cut_says_which_limit_cut_it(tiny_llama):
    """The page's own limit is not the model's: "the page shows at most 13 of the 64 tokens the
    model reads", and only a cut at the model's own limit says the model reads at most that."""
    name = tiny_llama.name
    page_cut = model_text_attention(tiny_llama, words(40), max_tokens=13)
    assert page_cut.cut_reason == f"the page shows at most 13 of the 64 tokens {name} reads"
    model_cut = model_text_attention(tiny_llama, words(80), max_tokens=64)
    assert model_cut.cut and model_cut.cut_reason == f"{name} reads at most 64 tokens"
    assert model_text_attention(tiny_llama, words(11)).cut_reason == ""

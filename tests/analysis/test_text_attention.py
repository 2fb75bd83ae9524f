"""Attention on a text: binning keeps attention mass; the seeded views are exact."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.analysis.text_attention import embed, seeded_layer, seeded_text_attention
from headlab.results.binning import bin_edges, downsample


def _row_stochastic(rng: np.random.Generator, *shape: int) -> np.ndarray:
    w = rng.random(shape) ** 3
    return w / w.sum(-1, keepdims=True)


@given(n=st.integers(1, 700), max_bins=st.integers(1, 300))
@settings(max_examples=60, deadline=None)
def test_bin_edges_cover_every_token_once(n: int, max_bins: int) -> None:
    edges = bin_edges(n, max_bins)
    assert edges[0] == 0 and edges[-1] == n
    assert len(edges) - 1 == min(n, max_bins)
    assert (np.diff(edges) >= 1).all()


def test_downsample_matches_a_loop_and_keeps_row_sums() -> None:
    rng = np.random.default_rng(3)
    w = _row_stochastic(rng, 2, 3, 37, 37)  # (layer, head, q_pos, k_pos)
    edges = bin_edges(37, 5)
    got = downsample(w, edges)
    assert got.shape == (2, 3, 5, 5)
    for a in range(5):
        for b in range(5):
            block = w[..., edges[a] : edges[a + 1], edges[b] : edges[b + 1]]
            expected = block.sum(-1).mean(-1)  # mean over queries of the mass on the key range
            np.testing.assert_allclose(got[..., a, b], expected, rtol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-12)


def test_downsample_is_identity_when_tokens_fit() -> None:
    w = _row_stochastic(np.random.default_rng(1), 1, 2, 11, 11)
    np.testing.assert_array_equal(downsample(w, bin_edges(11)), w)


def test_synthetic_views_are_the_same_weights_as_8_heads_and_as_1_head() -> None:
    tokens = ["one", "two", "three", "two", "one", "five", "seven"]
    multi, single = seeded_text_attention(tokens, d_model=24, num_heads=3, seed=11).views
    assert multi.weights.shape == (1, 3, 7, 7) and single.weights.shape == (1, 1, 7, 7)
    np.testing.assert_allclose(multi.weights.sum(-1), 1.0, rtol=1e-5)
    assert not np.allclose(multi.weights[0, 0], single.weights[0, 0], atol=1e-3)
    # Same text and seed: same page; repeated words get the same embedding (only position differs).
    again = seeded_text_attention(tokens, d_model=24, num_heads=3, seed=11)
    np.testing.assert_array_equal(again.views[0].weights, multi.weights)
    assert again.tokens == tokens and not again.cut


def test_single_head_view_is_one_softmax_over_all_components() -> None:
    tokens = ["to", "be", "or", "not", "to"]
    _, single = seeded_text_attention(tokens, d_model=12, num_heads=3, seed=4).views
    m, x = seeded_layer(12, 3, 4), embed(tokens, 12, 4)[0].double()
    w_q, w_k, _ = (w.detach().double() for w in m.projection_weights())
    b_q, b_k, _ = (b.detach().double() for b in m.projection_biases())
    q, k = x @ w_q.T + b_q, x @ w_k.T + b_k  # outside reference: plain matrix math
    expected = torch.softmax(q @ k.T / math.sqrt(12), dim=-1).numpy()
    np.testing.assert_allclose(single.weights[0, 0], expected, rtol=1e-4, atol=1e-6)
    # the 3-head view's head 1: softmax over components 4..7 only, scaled by sqrt(4)
    multi, _ = seeded_text_attention(tokens, d_model=12, num_heads=3, seed=4).views
    q1, k1 = q[:, 4:8], k[:, 4:8]
    expected_1 = torch.softmax(q1 @ k1.T / 2.0, dim=-1).numpy()
    np.testing.assert_allclose(multi.weights[0, 1], expected_1, rtol=1e-4, atol=1e-6)

"""Heatmap data: binning keeps attention mass, encoding round-trips, synthetic views are exact."""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.report.heatmap import (
    HeatmapView,
    bin_edges,
    downsample,
    embed,
    heatmap_data,
    seeded_layer,
    synthetic_views,
    words,
)


def _decode(head: dict, bins: int) -> np.ndarray:
    q = np.frombuffer(base64.b64decode(head["data"]), dtype="<u2").reshape(bins, bins)
    return q * head["scale"] / 65535


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


def test_encoded_heads_round_trip_within_one_quantisation_step() -> None:
    rng = np.random.default_rng(5)
    w = _row_stochastic(rng, 2, 3, 13, 13)
    data = heatmap_data("t", [f"t{i}" for i in range(13)], [HeatmapView("v", w)])
    assert data["bins"] == 13 and len(data["views"][0]["layers"]) == 2
    for l in range(2):
        for h in range(3):
            head = data["views"][0]["layers"][l][h]
            assert head["scale"] == pytest.approx(w[l, h].max())
            np.testing.assert_allclose(_decode(head, 13), w[l, h], atol=head["scale"] / 65535)


def test_long_input_is_binned_to_at_most_256() -> None:
    n = 2048
    w = np.full((1, 1, n, n), 1.0 / n)
    data = heatmap_data("t", ["w"] * n, [HeatmapView("v", w)])
    assert data["bins"] == 256 and len(data["tokens"]) == n and data["edges"][-1] == n
    np.testing.assert_allclose(_decode(data["views"][0]["layers"][0][0], 256), 8 / n, rtol=1e-4)


def test_heatmap_data_rejects_wrong_shapes_and_empty_text() -> None:
    with pytest.raises(ValueError, match=r"\(layer, head, 3, 3\)"):
        heatmap_data("t", ["a", "b", "c"], [HeatmapView("v", np.zeros((1, 2, 3, 4)))])
    with pytest.raises(ValueError, match="at least one word"):
        words("   ")


def test_synthetic_views_are_the_same_weights_as_8_heads_and_as_1_head() -> None:
    tokens = ["one", "two", "three", "two", "one", "five", "seven"]
    multi, single = synthetic_views(tokens, d_model=24, num_heads=3, seed=11)
    assert multi.weights.shape == (1, 3, 7, 7) and single.weights.shape == (1, 1, 7, 7)
    np.testing.assert_allclose(multi.weights.sum(-1), 1.0, rtol=1e-5)
    assert not np.allclose(multi.weights[0, 0], single.weights[0, 0], atol=1e-3)
    # Same text and seed: same page; repeated words get the same embedding (only position differs).
    again = synthetic_views(tokens, d_model=24, num_heads=3, seed=11)
    np.testing.assert_array_equal(again[0].weights, multi.weights)


def test_single_head_view_is_one_softmax_over_all_components() -> None:
    tokens = ["to", "be", "or", "not", "to"]
    _, single = synthetic_views(tokens, d_model=12, num_heads=3, seed=4)
    m, x = seeded_layer(12, 3, 4), embed(tokens, 12, 4)[0].double()
    w_q, w_k, _ = (w.detach().double() for w in m.projection_weights())
    b_q, b_k, _ = (b.detach().double() for b in m.projection_biases())
    q, k = x @ w_q.T + b_q, x @ w_k.T + b_k  # outside reference: plain matrix math
    expected = torch.softmax(q @ k.T / math.sqrt(12), dim=-1).numpy()
    np.testing.assert_allclose(single.weights[0, 0], expected, rtol=1e-4, atol=1e-6)
    # the 3-head view's head 1: softmax over components 4..7 only, scaled by sqrt(4)
    multi, _ = synthetic_views(tokens, d_model=12, num_heads=3, seed=4)
    q1, k1 = q[:, 4:8], k[:, 4:8]
    expected_1 = torch.softmax(q1 @ k1.T / 2.0, dim=-1).numpy()
    np.testing.assert_allclose(multi.weights[0, 1], expected_1, rtol=1e-4, atol=1e-6)

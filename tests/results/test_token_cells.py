"""Token-level explorer cells: 8-bit levels per head, the causal triangle, deflated; read back
through the explorer's checks and decoded against the float64 weights they came from."""

from __future__ import annotations

import base64
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.results import token_cells
from headlab.results.attention_views import AttentionView
from headlab.results.explorers import (
    TOKEN_CELLS,
    check_explorer,
    decoded_views,
    explorer_bytes,
    heatmap_data,
)
from headlab.results.schema import Fields


def softmax_weights(layers: int, heads: int, n: int, seed: int, causal: bool) -> np.ndarray:
    """(layer, head, n, n) rows of a softmax of random scores, masked above the diagonal."""
    scores = np.random.default_rng(seed).normal(size=(layers, heads, n, n)) * 3
    if causal:
        scores = np.where(np.tri(n, dtype=bool), scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@settings(max_examples=20, deadline=None)
@given(n=st.sampled_from([1, 2, 7, 13, 31]), seed=st.integers(0, 2**16), causal=st.booleans())
def test_a_cell_decodes_to_its_weights_within_half_a_level(n, seed, causal):
    (w,) = softmax_weights(1, 1, n, seed, causal)[0]
    cell = token_cells.encode(w, triangle=causal)
    back = token_cells.decode(cell, n, causal)
    assert cell["scale"] == w.max()
    np.testing.assert_allclose(back, w, rtol=0, atol=w.max() / 510 + 1e-12)
    if causal:
        assert not np.triu(back, 1).any()


def test_the_triangle_is_kept_only_where_every_head_is_causal():
    causal = softmax_weights(2, 3, 11, 0, causal=True)
    full = causal.copy()
    full[1, 2, 0, 5] = 1e-3
    assert token_cells.is_causal(causal) and not token_cells.is_causal(full)
    assert token_cells.cell_count(11, True) == 66 and token_cells.cell_count(11, False) == 121
    tokens = [f"t{i}" for i in range(11)]
    one = heatmap_data("t", tokens, [AttentionView("v", causal)], token_level=True)
    both = heatmap_data(
        "t", tokens, [AttentionView("v", causal), AttentionView("w", full)], token_level=True
    )
    assert one["triangle"] and not both["triangle"]
    assert one["cells"] == both["cells"] == TOKEN_CELLS and one["bins"] == 11


@pytest.mark.parametrize("causal", [True, False])
def test_a_token_level_explorer_reads_back_and_decodes_every_head(causal):
    n, tokens = 17, [f"t{i}" for i in range(17)]
    w = softmax_weights(3, 5, n, 4, causal)
    explorer = heatmap_data("t", tokens, [AttentionView("v", w)], token_level=True, max_bins=4)
    assert explorer["edges"] == list(range(n + 1))  # one cell a token whatever max_bins
    check_explorer(Fields(explorer, "explorer"))
    (view,) = decoded_views(explorer)
    assert view.weights.shape == (3, 5, n, n)
    step = w.max(axis=(2, 3), keepdims=True) / 510
    assert np.all(np.abs(view.weights - w) <= step + 1e-12)
    assert explorer_bytes(explorer) == sum(
        len(c["z"]) for layer in explorer["views"][0]["layers"] for c in layer
    )


def test_a_broken_token_cell_is_named():
    w = softmax_weights(1, 2, 5, 1, True)
    good = heatmap_data("t", list("abcde"), [AttentionView("v", w)], token_level=True)
    short = zlib.compress(bytes(14))  # the triangle of 5 tokens has 15 cells
    bomb = zlib.compress(bytes(50_000_000))  # inflating stops past the 15 cells it may hold
    for z in (base64.b64encode(short).decode(), base64.b64encode(bomb).decode(), "not base64!"):
        heads = [good["views"][0]["layers"][0][0], {"scale": 0.5, "z": z}]
        broken = {**good, "views": [{"name": "v", "layers": [heads]}]}
        with pytest.raises(ValueError, match=r"explorer\.views\[0\]\.layers\[0\]\[1\]"):
            check_explorer(Fields(broken, "explorer"))
    with pytest.raises(ValueError, match="triangle"):
        check_explorer(Fields({**good, "triangle": "yes"}, "explorer"))
    with pytest.raises(ValueError, match="cells"):
        check_explorer(Fields({**good, "cells": "uint4"}, "explorer"))


def test_wrong_shapes_are_refused():
    with pytest.raises(ValueError, match=r"must be \(layer, head, 3, 3\)"):
        heatmap_data(
            "t", list("abc"), [AttentionView("v", np.zeros((1, 1, 3, 4)))], token_level=True
        )

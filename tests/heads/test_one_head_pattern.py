"""One head's pattern at any length: its tiles are the head's own weights (against
``model_text_attention``, itself checked against the model's q and k), its overview the block
means of those weights, and a budget keeps every weight at or above the lowest floor that fits
(against a brute-force count of the weights themselves)."""

from __future__ import annotations

import numpy as np
import pytest

from headlab.heads.model_text_attention import model_text_attention
from headlab.heads.one_head_pattern import head_pattern
from headlab.results.head_pattern_result import ENTRY_BYTES, TILE_OVERHEAD, HeadPattern, tile_bytes


def words(n: int) -> str:
    return " ".join(f"t{(7 * i) % 97}" for i in range(n))


def block_means(weights: np.ndarray, cell: int) -> np.ndarray:
    """(q_cell, k_cell): mean over a cell's queries of the weight summed over its keys."""
    n = weights.shape[0]
    cells = -(-n // cell)
    out = np.zeros((cells, cells))
    for a in range(cells):
        rows = weights[a * cell : (a + 1) * cell]
        for b in range(cells):
            out[a, b] = rows[:, b * cell : (b + 1) * cell].sum(1).mean()
    return out


@pytest.mark.parametrize(("layer", "head"), [(0, 5), (2, 1)])
def test_tiles_and_overview_are_the_heads_own_weights(tiny_llama, layer, head):
    text = words(53)  # 53 tokens: tiles of 13 leave a ragged last row and column
    full = model_text_attention(tiny_llama, text, max_tokens=64).views[0].weights[layer, head]
    got = head_pattern(tiny_llama, text, layer, head, tile=13, cells=7)
    assert len(got.tokens) == 53 and got.cell == 8 and got.cells == 7
    np.testing.assert_allclose(got.overview_weights(), block_means(full, 8), atol=1e-5)
    causal = {(q0, k0) for q0 in range(0, 53, 13) for k0 in range(0, q0 + 1, 13)}
    assert {(t.q0, t.k0) for t in got.tiles} == causal  # every tile with weight, no other
    assert got.floor == 0.0 and got.causal and got.kept == 53 * 54 // 2
    for q0, k0 in causal:
        exact = got.tile_weights(q0, k0)
        np.testing.assert_allclose(
            np.nan_to_num(exact), full[q0 : q0 + 13, k0 : k0 + 13], atol=1e-6
        )
    assert got.tile_weights(0, 13) is None  # above the diagonal: no weight, not kept
    assert got.mass == pytest.approx(1.0)


def every_kept_weight(pattern: HeadPattern, n: int) -> np.ndarray:
    """(q_pos, k_pos) of the pattern's exact weights, NaN where it keeps none."""
    out = np.full((n, n), np.nan, dtype=np.float32)
    for t in pattern.tiles:
        out[t.q0 : t.q0 + t.rows, t.k0 : t.k0 + t.cols] = pattern.tile_weights(t.q0, t.k0)
    return out


def test_a_budget_keeps_every_weight_above_the_lowest_floor_that_fits(tiny_llama):
    n, tile = 41, 11
    full = model_text_attention(tiny_llama, words(n), max_tokens=64).views[0].weights[1, 2]
    room = 150  # weights the budget holds beside the tiles' overhead (of 861 positive ones)
    budget = TILE_OVERHEAD * 4 * 4 + ENTRY_BYTES * room
    got = head_pattern(tiny_llama, words(n), 1, 2, tile=tile, budget=budget)
    kept = every_kept_weight(got, n)
    positive = np.sort(full[full > 0])[::-1]
    # the lowest floor that fits: the room-th weight at or above it, the next one below it (the
    # two routes to the weights may differ in the last bit)
    assert positive[room] <= got.floor * (1 + 1e-6) and got.floor <= positive[room - 1] * (1 + 1e-6)
    held = ~np.isnan(kept)
    assert (kept[held] >= got.floor).sum() <= room
    np.testing.assert_allclose(kept[held], full[held], atol=1e-6)
    assert held[full >= got.floor * (1 + 1e-6)].all()  # every weight at or above the floor
    assert got.mass == pytest.approx(full[held].sum() / n, rel=1e-5)
    assert len(HeadPattern.from_dict(got.to_dict()).to_dict()["tiles"]) == len(got.tiles)
    assert len(repr(got)) < 200 and f"every weight >= {got.floor:.3g}" in repr(got)
    # a tile asked for comes whole, whatever its weights
    asked = head_pattern(
        tiny_llama, words(n), 1, 2, tile=tile, budget=budget + tile_bytes(tile), focus=((25, 3),)
    )
    whole = asked.tile_weights(22, 0)
    np.testing.assert_allclose(whole, full[22:33, 0:11], atol=1e-6)
    again = HeadPattern.from_dict(asked.to_dict())
    assert again.to_dict() == asked.to_dict()


def test_bad_requests_are_refused_before_the_run(tiny_llama):
    with pytest.raises(ValueError, match="layer must be between 0 and 2, got 3"):
        head_pattern(tiny_llama, "t1 t2", 3, 0)
    with pytest.raises(ValueError, match="head must be between 0 and 5, got 6"):
        head_pattern(tiny_llama, "t1 t2", 0, 6)
    with pytest.raises(ValueError, match="empty text"):
        head_pattern(tiny_llama, "  ", 0, 0)
    with pytest.raises(ValueError, match="tile must be between 1 and 256, got 300"):
        head_pattern(tiny_llama, "t1 t2", 0, 0, tile=300)

"""One head's pattern at any length: its tiles are the head's own weights (against
``model_text_attention``, itself checked against the model's q and k), its overview the block
means of those weights, and a budget keeps the tiles holding the most attention."""

from __future__ import annotations

import numpy as np
import pytest

from headlab.heads.model_text_attention import model_text_attention
from headlab.heads.one_head_pattern import head_pattern
from headlab.results.head_pattern_result import HeadPattern, tile_bytes


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
    for q0, k0 in causal:
        exact = got.tile_weights(q0, k0)
        np.testing.assert_allclose(exact, full[q0 : q0 + 13, k0 : k0 + 13], atol=1e-6)
    assert got.tile_weights(0, 13) is None  # above the diagonal: no weight, not kept
    assert got.mass == pytest.approx(1.0)


def test_a_budget_keeps_the_tiles_with_the_most_attention(tiny_llama):
    text = words(41)
    full = model_text_attention(tiny_llama, text, max_tokens=64).views[0].weights[1, 2]
    got = head_pattern(tiny_llama, text, 1, 2, tile=11, budget=3 * tile_bytes(11) + 5)
    masses = {(q0, k0): full[q0 : q0 + 11, k0 : k0 + 11].sum()
              for q0 in range(0, 41, 11) for k0 in range(0, 41, 11)}  # fmt: skip
    best = sorted(masses, key=lambda key: -masses[key])[:3]
    assert sorted((t.q0, t.k0) for t in got.tiles) == sorted(best)
    assert got.mass == pytest.approx(sum(masses[k] for k in best) / 41, rel=1e-5)
    asked = head_pattern(tiny_llama, text, 1, 2, tile=11, budget=3 * tile_bytes(11) + 5,
                         focus=((25, 3),))  # fmt: skip
    assert (22, 0) in [(t.q0, t.k0) for t in asked.tiles] and (22, 0) not in best
    again = HeadPattern.from_dict(got.to_dict())
    assert again.to_dict() == got.to_dict()
    assert len(repr(got)) < 200 and "3 exact 11x11 tiles" in repr(got)


def test_bad_requests_are_refused_before_the_run(tiny_llama):
    with pytest.raises(ValueError, match="layer must be between 0 and 2, got 3"):
        head_pattern(tiny_llama, "t1 t2", 3, 0)
    with pytest.raises(ValueError, match="head must be between 0 and 5, got 6"):
        head_pattern(tiny_llama, "t1 t2", 0, 6)
    with pytest.raises(ValueError, match="empty text"):
        head_pattern(tiny_llama, "  ", 0, 0)

"""One head's attention over one text, at any length the model reads, as a ``HeadPattern``:
the overview from the streaming sums' blocked map, and exact tiles within a byte budget.

One forward of the model: the head's layer streams its sums (``attention.streaming_sums``) with
``block`` = the overview's cell, and a tap keeps the head's rows of each chunk of weights as the
kernel computes them (one (q_pos, k_pos) float32 array of the one head: 268 MB at 8192 tokens,
checked against free memory first), from which the tiles are cut. The model's other heads and
layers are never held.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from headlab.attention.streaming_sums import HeadSums, StatisticsRequest, observing
from headlab.limits import check_fits, check_int
from headlab.models.interface import HeadModel
from headlab.results.head_pattern_result import (
    OVERVIEW_CELLS,
    TILE,
    TILE_BUDGET,
    HeadPattern,
    PatternTile,
    encode_floats,
    tile_bytes,
)


def head_pattern(
    model: HeadModel,
    text: str,
    layer: int,
    head: int,
    *,
    max_tokens: int | None = None,
    budget: int = TILE_BUDGET,
    tile: int = TILE,
    cells: int = OVERVIEW_CELLS,
    focus: tuple[tuple[int, int], ...] = (),
) -> HeadPattern:
    """``model``'s ``head`` of ``layer`` on ``text`` (cut to ``max_tokens``, default the model's
    limit): an overview of at most ``cells`` cells a side and exact ``tile`` x ``tile`` tiles
    within ``budget`` bytes: the tiles holding the positions ``focus`` ((q_pos, k_pos) pairs:
    blocks a reader asks to see exactly) first, then those holding the most attention.
    ValueError for an empty text, a layer, head or max_tokens out of
    range, or when the one head's weights would not fit in memory (``check_fits``)."""
    check_int("layer", layer, low=0, high=model.num_layers - 1)
    check_int("head", head, low=0, high=model.heads_per_layer[layer] - 1)
    limit = model.max_positions if max_tokens is None else max_tokens
    check_int("max_tokens", limit, low=2, high=model.max_positions)
    check_int("budget", budget, low=0)
    check_int("tile", tile)
    check_int("cells", cells)
    for q_pos, k_pos in focus:
        check_int("focus query position", q_pos, low=0, high=limit - 1)
        check_int("focus key position", k_pos, low=0, high=limit - 1)
    if not text.strip():
        raise ValueError("expected a text with at least one token, got an empty text")
    batch = model.tokenize([text], limit)
    tokens = list(batch.tokens[0])
    n = len(tokens)
    check_fits(f"one head's weights on {n} tokens", 4 * n * n)
    weights = np.zeros((n, n), dtype=np.float32)  # (q_pos, k_pos) of the one head
    real = batch.attention_mask[0].nonzero().flatten()  # the text's positions in the batch

    def keep(chunk: Tensor, rows: slice) -> None:  # chunk: (batch, head, c, keys)
        part = chunk[0, head].float().cpu().numpy()
        weights[rows.start : rows.stop, : part.shape[-1]] = part[:, :n]

    cell = -(-n // cells)
    found: list[HeadSums] = []
    request = StatisticsRequest(query_mask=batch.attention_mask, block=cell, tap=keep,
                                report=found.append)  # fmt: skip
    with torch.no_grad(), observing(model.attention_layers()[layer], request):
        model.run(batch)
    if len(found) != 1 or len(real) != n:
        raise ValueError(f"expected one call of layer {layer} on one unpadded text, got "
                         f"{len(found)} calls and {len(real)} of {n} positions")  # fmt: skip
    sums = found[0]
    overview = (sums.blocks[head] / sums.block_rows.clamp_min(1)[:, None]).numpy()
    first = [(q - q % tile, k - k % tile) for q, k in focus if max(q, k) < n]
    tiles, mass = tiles_within(weights, budget, tile, first)
    total = max(n, model.count_tokens(text))
    cut = "" if total <= n else f"cut to {n} of {total} tokens (max_tokens)"
    return HeadPattern(model.name, layer, head, tokens, cell, encode_floats(overview), tile,
                       tiles, budget, mass, total, cut)  # fmt: skip


def tiles_within(
    weights: np.ndarray, budget: int, tile: int, first: list[tuple[int, int]] | None = None
) -> tuple[list[PatternTile], float]:
    """The tiles (at tile-aligned (q0, k0)) with any weight, ``first`` first, then most attention
    first, while ``budget`` bytes last; and the share of all the attention they hold."""
    n = weights.shape[0]
    starts = range(0, n, tile)
    masses = {(q0, k0): float(weights[q0 : q0 + tile, k0 : k0 + tile].sum(dtype=np.float64))
              for q0 in starts for k0 in starts}  # fmt: skip
    asked = list(dict.fromkeys(key for key in first or [] if key in masses))
    order = asked + sorted((key for key, m in masses.items() if m > 0 and key not in asked),
                           key=lambda key: (-masses[key], key))  # fmt: skip
    total = sum(masses.values()) or 1.0
    kept, spent, held = [], 0, 0.0
    for q0, k0 in order:
        block = weights[q0 : q0 + tile, k0 : k0 + tile]
        cost = tile_bytes(tile)
        if spent + cost > budget:
            break
        spent += cost
        held += masses[(q0, k0)]
        kept.append(PatternTile(q0, k0, *block.shape, encode_floats(block)))
    return sorted(kept, key=lambda t: (t.q0, t.k0)), min(1.0, held / total)

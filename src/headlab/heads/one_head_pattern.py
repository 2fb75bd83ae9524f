"""One head's attention over one text, at any length the model reads, as a ``HeadPattern``:
the overview from the streaming sums' blocked map, and the head's exact weights within a byte
budget: every weight at or above a floor, the floor as low as the budget allows.

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
    ENTRY_BYTES,
    OVERVIEW_CELLS,
    TILE,
    TILE_BUDGET,
    TILE_OVERHEAD,
    HeadPattern,
    PatternTile,
    b64_bytes,
    encode_floats,
    encode_offsets,
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
    limit): an overview of at most ``cells`` cells a side and, in ``tile`` x ``tile`` tiles
    (at most 256) within ``budget`` bytes, the exact weights: the tiles holding the positions
    ``focus`` ((q_pos, k_pos) pairs: blocks a reader asks to see whole) first, then every weight
    at or above the lowest floor that fits (``tiles_within``).
    ValueError for an empty text, a layer, head or max_tokens out of
    range, or when the one head's weights would not fit in memory (``check_fits``)."""
    check_int("layer", layer, low=0, high=model.num_layers - 1)
    check_int("head", head, low=0, high=model.heads_per_layer[layer] - 1)
    limit = model.max_positions if max_tokens is None else max_tokens
    check_int("max_tokens", limit, low=2, high=model.max_positions)
    check_int("budget", budget, low=0)
    check_int("tile", tile, high=TILE)  # a tile's offsets are uint16
    check_int("cells", cells)
    for q_pos, k_pos in focus:
        check_int("focus query position", q_pos, low=0, high=limit - 1)
        check_int("focus key position", k_pos, low=0, high=limit - 1)
    if not text.strip():
        raise ValueError("expected a text with at least one token, got an empty text")
    batch = model.tokenize([text], limit)
    tokens = list(batch.tokens[0])
    n = len(tokens)
    # the weights, and the positive ones copied with their mask to find the floor
    check_fits(f"one head's weights on {n} tokens", 9 * n * n)
    weights = np.zeros((n, n), dtype=np.float32)  # (q_pos, k_pos) of the one head
    real = batch.attention_mask[0].nonzero().flatten()  # the text's positions in the batch

    def keep(chunk: Tensor, rows: slice) -> None:  # chunk: (batch, head, c, keys)
        part = chunk[0, head].float().cpu().numpy()
        weights[rows.start : rows.stop, : part.shape[-1]] = part[:, :n]

    cell = -(-n // cells)
    found: list[HeadSums] = []
    request = StatisticsRequest(
        query_mask=batch.attention_mask, block=cell, tap=keep, report=found.append
    )
    with torch.no_grad(), observing(model.attention_layers()[layer], request):
        model.run(batch)
    if len(found) != 1 or len(real) != n:
        raise ValueError(
            f"expected one call of layer {layer} on one unpadded text, got "
            f"{len(found)} calls and {len(real)} of {n} positions"
        )
    sums = found[0]
    overview = (sums.blocks[head] / sums.block_rows.clamp_min(1)[:, None]).numpy()
    first = [(q - q % tile, k - k % tile) for q, k in focus if max(q, k) < n]
    tiles, floor, mass, causal = tiles_within(weights, budget, tile, first)
    total = max(n, model.count_tokens(text))
    cut = "" if total <= n else f"cut to {n} of {total} tokens (max_tokens)"
    return HeadPattern(
        model.name,
        layer,
        head,
        tokens,
        cell,
        encode_floats(overview),
        tile,
        tiles,
        budget,
        mass,
        total,
        cut,
        floor,
        causal,
    )


def tiles_within(
    weights: np.ndarray, budget: int, tile: int, first: list[tuple[int, int]] | None = None
) -> tuple[list[PatternTile], float, float, bool]:
    """``weights`` ((q_pos, k_pos) float32) as tiles of ``tile`` x ``tile`` within ``budget``
    bytes: the tiles at ``first`` (tile-aligned (q0, k0)) whole, then every weight at or above
    the smallest floor that fits, each tile dense or sparse, whichever is smaller. Returns the
    tiles, the floor (0: every weight is kept), the share of all the attention they hold, and
    whether every weight above the diagonal is 0 (a causal head)."""
    n = weights.shape[0]
    starts = range(0, n, tile)
    asked = list(dict.fromkeys(key for key in first or [] if max(key) < n))
    whole = set(asked[: max(0, budget // tile_bytes(tile))])
    left = budget - tile_bytes(tile) * len(whole) - TILE_OVERHEAD * len(starts) ** 2
    floor = floor_within(weights, max(0, left) // ENTRY_BYTES)
    kept, held, causal = [], 0.0, True
    for q0 in starts:
        for k0 in starts:
            block = weights[q0 : q0 + tile, k0 : k0 + tile]  # (q_pos, k_pos) of the tile
            if k0 + tile > q0 + 1:  # the tile reaches above the diagonal
                causal = causal and not np.triu(block, 1 + q0 - k0).any()
            keep = np.ones(block.shape, bool) if (q0, k0) in whole else block >= floor
            if floor == 0:
                keep &= block > 0
            count = int(keep.sum())
            if count == 0 and (q0, k0) not in whole:
                continue
            held += float(block.sum(dtype=np.float64, where=keep))
            dense = b64_bytes(4 * block.size)
            if (q0, k0) in whole or dense <= b64_bytes(4 * count) + b64_bytes(2 * count):
                held += float(block.sum(dtype=np.float64, where=~keep))
                kept.append(PatternTile(q0, k0, *block.shape, encode_floats(block)))
            else:
                where = np.flatnonzero(keep)  # row * cols + col, ascending
                kept.append(
                    PatternTile(
                        q0,
                        k0,
                        *block.shape,
                        encode_floats(block.ravel()[where]),
                        encode_offsets(where),
                    )
                )
    total = float(weights.sum(dtype=np.float64)) or 1.0
    return kept, floor, min(1.0, held / total), causal


def floor_within(weights: np.ndarray, count: int) -> float:
    """The smallest float32 floor such that at most ``count`` positive weights are >= it
    (0.0 when every positive weight fits)."""
    positive = weights[weights > 0]
    if positive.size <= count:
        return 0.0
    if count == 0:
        return float(np.nextafter(positive.max(), np.float32(np.inf)))
    kth = np.partition(positive, positive.size - count)[positive.size - count]
    if int((positive >= kth).sum()) > count:  # ties at the k-th: keep only those above it
        kth = np.nextafter(kth, np.float32(np.inf))
    return float(kth)

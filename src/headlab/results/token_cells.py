"""Token-level heatmap cells: one cell a token, 8 bits a cell, the causal triangle only, deflated.

The report's model explorer shows every head at one cell a token (SmolLM2's 270 heads and 30
one-head views at 512 tokens), where binning would hide a previous-token head's diagonal one
position off the main one. Each head's weights (q_pos, k_pos) are quantised to 8 bits relative
to the head's largest weight (``scale``: weight = level * scale / 255, so a weight below
scale / 510 shows as 0), only the rows' causal part (k_pos <= q_pos) is kept when every head is
causal, and the bytes are deflated (zlib) and base64-encoded. Most weights of a trained head are
near zero, so the bytes deflate well: SmolLM2 on 512 tokens of text takes about 6 MB for all
300 heads (docs/benchmarks.md). The page inflates a head with the browser's
``DecompressionStream`` when it is first shown.
"""

from __future__ import annotations

import base64
import zlib

import numpy as np

#: Quantisation levels of a token-level cell (8 bits).
LEVELS = 255


def is_causal(weights: np.ndarray) -> bool:
    """Whether every (..., q_pos, k_pos) matrix is zero above its diagonal (k_pos > q_pos)."""
    n = weights.shape[-1]
    return not any(np.triu(head, 1).any() for head in weights.reshape(-1, n, n))


def cell_count(n: int, triangle: bool) -> int:
    """Cells kept of an n x n head: the causal triangle's n (n + 1) / 2, or all n^2."""
    return n * (n + 1) // 2 if triangle else n * n


def encode(matrix: np.ndarray, triangle: bool) -> dict[str, object]:
    """(n, n) weights -> {scale, z}: uint8 levels, row by row (each row's keys 0..q_pos when
    ``triangle``), deflated, base64."""
    scale = float(matrix.max()) if matrix.size else 0.0
    levels = np.zeros(matrix.shape, dtype=np.uint8)
    if scale > 0:
        levels = np.rint(np.clip(matrix, 0, None) / scale * LEVELS).astype(np.uint8)
    kept = levels[np.tril_indices(matrix.shape[0])] if triangle else levels.ravel()
    return {"scale": scale, "z": base64.b64encode(zlib.compress(kept.tobytes(), 9)).decode("ascii")}


def levels_of(cell: dict, n: int, triangle: bool) -> np.ndarray | None:
    """The cell's uint8 levels (cell_count values), or None when ``z`` is not base64 of a
    deflated stream of exactly that many bytes (inflating stops past it: no bomb)."""
    expected = cell_count(n, triangle)
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(cell["z"], validate=True), expected + 1)
    except (ValueError, zlib.error, TypeError):
        return None
    if len(raw) != expected or not inflater.eof:
        return None
    return np.frombuffer(raw, dtype=np.uint8)


def decode(cell: dict, n: int, triangle: bool) -> np.ndarray:
    """{scale, z} -> (n, n) float64, the inverse of ``encode`` to its step (scale / 255);
    ValueError for a cell that does not hold n x n levels."""
    levels = levels_of(cell, n, triangle)
    if levels is None:
        raise ValueError(f"expected a token-level cell of {cell_count(n, triangle)} levels")
    out = np.zeros((n, n), dtype=np.float64)
    values = levels.astype(np.float64) * (cell["scale"] / LEVELS)
    if triangle:
        out[np.tril_indices(n)] = values
    else:
        out[:] = values.reshape(n, n)
    return out

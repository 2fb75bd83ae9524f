"""Bins of token positions, for attention weights too long to show one cell per token.

Binning averages over the query positions of a bin and sums over the key positions, so a binned
row is still the attention mass a query of that bin puts on a range of keys (rows keep summing
to 1).
"""

from __future__ import annotations

import numpy as np

MAX_BINS = 256


def bin_edges(n: int, max_bins: int = MAX_BINS) -> np.ndarray:
    """Start index of each bin and n at the end: (bins + 1,) ints; one token a bin if n fits."""
    if n <= 0:
        raise ValueError(f"need at least one token, got {n}")
    bins = min(n, max_bins)
    return np.floor(np.arange(bins + 1) * n / bins).astype(np.int64)


def downsample(weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(..., q_pos, k_pos) -> (..., bins, bins): mean over the query bin, sum over the key bin."""
    starts = edges[:-1]
    counts = np.diff(edges)
    summed = np.add.reduceat(np.add.reduceat(weights, starts, axis=-1), starts, axis=-2)
    return summed / counts[:, None]

"""A numerically stable softmax whose fully masked rows are all zero, never NaN.

    softmax(x)_j = exp(x_j - m) / sum_l exp(x_l - m),    m = max_l x_l

Subtracting the row maximum m changes nothing mathematically and keeps exp() from overflowing.
A row whose entries are all -inf (every key masked) has no maximum to subtract: torch's softmax
gives NaN there (0/0). Here such a row gets all-zero weights, so that its attention output and its
gradient are zero too. This is headlab's convention everywhere (see docs/reference.md).
"""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of ``x`` along ``axis``; rows that are entirely -inf give zeros. dtype preserved."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"softmax expects a floating point array, got dtype {x.dtype}")
    row_max = np.max(x, axis=axis, keepdims=True)
    # -inf - (-inf) would be NaN: shift fully masked rows by 0 instead (their exp() is all 0).
    row_max = np.where(np.isfinite(row_max), row_max, 0).astype(x.dtype, copy=False)
    e = np.exp(x - row_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)

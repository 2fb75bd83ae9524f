"""Scaled dot-product attention in NumPy, forward and a backward pass written out by hand.

Shapes: q (..., q_pos, d_head), k and v (..., k_pos, d_head); the leading dims (batch, head, ...)
broadcast. Weights are (..., q_pos, k_pos): row i holds how much query i reads from each key.
Masks use torch's meaning: a boolean mask is True where a query may NOT attend; a float mask is
added to the scores (-inf forbids). A query row whose keys are all masked gets zero weights, zero
output and zero gradient (torch gives NaN there; see docs/reference.md).
"""

from __future__ import annotations

import math

import numpy as np

from headlab.reference.softmax import softmax


def additive_mask(mask: np.ndarray, scores_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Turn a bool or float mask into a float mask to add to scores of ``scores_shape``.

    Raises ValueError when the mask is neither bool nor floating point, or when it does not
    broadcast to ``scores_shape`` without enlarging it.
    """
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ and not np.issubdtype(mask.dtype, np.floating):
        raise ValueError(f"mask must be bool or floating point, got dtype {mask.dtype}")
    try:
        shape = np.broadcast_shapes(mask.shape, scores_shape)
    except ValueError:
        shape = None
    if shape != tuple(scores_shape):
        raise ValueError(
            f"mask must broadcast to the scores' shape (..., q_pos, k_pos)={tuple(scores_shape)}, "
            f"got shape {mask.shape}"
        )
    if mask.dtype == np.bool_:
        return np.where(mask, -np.inf, 0.0).astype(dtype)
    return mask.astype(dtype, copy=False)


def _sum_to_shape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Undo broadcasting: sum ``x`` over the dims added or stretched to reach ``shape``."""
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=stretched, keepdims=True) if stretched else x


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Scaled dot-product attention.

        S = tau Q K^T + M      (..., q_pos, k_pos),  tau = scale, default 1 / sqrt(d_head)
        P = softmax(S)         rows sum to one, or are all zero when fully masked
        O = P V                (..., q_pos, d_head)

    Returns (O, P). Raises ValueError for mismatched head sizes or positions, or a bad mask.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_head (last dim), got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must share k_pos (dim -2), got k {k.shape} and v {v.shape}")
    tau = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = tau * (q @ np.swapaxes(k, -1, -2))  # (..., q_pos, k_pos)
    if mask is not None:
        scores = scores + additive_mask(mask, scores.shape, scores.dtype)
    weights = softmax(scores, axis=-1)
    return weights @ v, weights


# Backward of one head. With O = P V, P = softmax(S), S = tau Q K^T + M and an upstream dO:
#
#   dV = P^T dO                                   (O is linear in V)
#   dP = dO V^T                                   (O is linear in P)
#   dS_ij = sum_l dP_il dP_il/dS_ij = sum_l dP_il P_il (delta_lj - P_ij)
#         = P_ij (dP_ij - sum_l P_il dP_il)       (the softmax Jacobian diag(p) - p p^T, per row)
#   sum_l P_il dP_il = sum_l P_il sum_d dO_id V_ld = sum_d dO_id O_id = rowsum(dO * O)_i
#   so  dS = P * (dP - rowsum(dO * O))            (rowsum kept as a column, broadcast over k_pos)
#   dQ = tau dS K,    dK = tau dS^T Q             (S is bilinear in Q and K)
#
# A fully masked row has P_i = 0, hence O_i = 0, dS_i = 0: it sends no gradient anywhere.
# The additive mask M receives dS as well (not returned: masks are not parameters here).
def attention_backward(
    d_out: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    weights: np.ndarray,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients (dq, dk, dv) of attention given the upstream gradient ``d_out`` = dL/dO.

    d_out: (..., q_pos, d_head); q, k, v as in ``attention``; weights: the P it returned;
    scale: the tau it used (default 1 / sqrt(d_head)). Each gradient has its input's shape
    (summed over broadcast dims).
    """
    tau = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = weights @ v  # (..., q_pos, d_head)
    dv = np.swapaxes(weights, -1, -2) @ d_out  # (..., k_pos, d_head)
    dp = d_out @ np.swapaxes(v, -1, -2)  # (..., q_pos, k_pos)
    ds = weights * (dp - np.sum(d_out * out, axis=-1, keepdims=True))  # (..., q_pos, k_pos)
    dq = tau * (ds @ k)  # (..., q_pos, d_head)
    dk = tau * (np.swapaxes(ds, -1, -2) @ q)  # (..., k_pos, d_head)
    return _sum_to_shape(dq, q.shape), _sum_to_shape(dk, k.shape), _sum_to_shape(dv, v.shape)

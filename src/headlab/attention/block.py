"""The attention math of one block of query rows, written once: scores, soft-cap, mask, softmax
(with sink logits), values. Every path of the kernel (``headlab.attention.kernel``), the
averaged path's own backward (``headlab.attention.averaged``) and the streamed window errors
(``headlab.attention.streaming_sums``) call these functions.

Shapes: q (batch, head, rows, d_head); k and v (batch, kv_head, keys, d_head|d_value), head a
multiple of kv_head (grouped K/V heads are never repeated in memory: ``grouped_matmul``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from headlab.attention.mask_spec import MergedMask
from headlab.attention.sites import Sites


def grouped_matmul(a: Tensor, b: Tensor) -> Tensor:
    """a (batch, head, rows, c) @ b (batch, kv_head, c, n) -> (batch, head, rows, n), query head
    i with K/V head i // (head / kv_head): each group's heads stacked as rows, b never copied."""
    batch, _, rows, c = a.shape
    heads, groups = int(a.shape[1]), int(b.shape[1])  # ints also while a graph is traced
    if groups == heads:
        return a @ b
    out = a.reshape(batch, groups, heads // groups * rows, c) @ b
    return out.view(batch, heads, rows, b.shape[-1])


def merge_view(scores: Tensor, view: int) -> Tensor:
    """(batch, head, q, k) -> (batch, view, q, k): each group of head / view consecutive heads
    summed and divided by sqrt(head / view)."""
    batch, heads, q_len, k_len = scores.shape
    m = heads // view
    return scores.view(batch, view, m, q_len, k_len).sum(dim=2) / math.sqrt(m)


def softmax_with_sinks(scores: Tensor, sinks: Tensor | None, *, inplace: bool) -> Tensor:
    """softmax over the keys, with a sink logit per head (head,) as an extra column whose weight
    is dropped (rows then sum to less than one)."""
    if sinks is not None:
        column = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]
    if inplace:
        return torch.softmax(scores, dim=-1, out=scores)
    return scores.softmax(dim=-1)


def values(weights: Tensor, v: Tensor, heads: int) -> Tensor:
    """weights (batch, head|view, q, k) @ v (batch, kv_head, k, d) -> (batch, head, q, d); with a
    view, each view head's weights serve all of its member heads."""
    if weights.shape[1] != heads:
        weights = weights.repeat_interleave(heads // weights.shape[1], dim=1)
    return grouped_matmul(weights, v)


def block_weights(
    q: Tensor,
    k: Tensor,
    mask: MergedMask | None,
    *,
    scale: float,
    softcap: float | None,
    sinks: Tensor | None,
    view: int | None,
    sites: Sites | None = None,
    inplace: bool = False,
) -> tuple[Tensor, Tensor]:
    """(scores S after the mask, weights P) of query rows q (batch, head, rows, d) over keys
    k (batch, kv_head, keys, d), both (batch, head|view, rows, keys). ``inplace`` (no autograd)
    turns the scores into the weights in place: the two are then the same tensor."""
    if inplace and sites is None and softcap is None and view is None:
        s = scaled_masked(q, k, scale, mask)
    else:
        # Scale q (rows x d) rather than the scores (rows x keys): one pass over the small
        # tensor instead of the big one, and torch's own order of operations.
        s = grouped_matmul(q * scale, k.transpose(-2, -1))  # (batch, head, rows, keys)
        if sites is not None:
            s = sites("logits", s)
        if view is not None:
            s = merge_view(s, view)
            if sinks is not None:  # the sink column merges as every score column
                m = sinks.shape[0] // view
                sinks = sinks.view(view, m).sum(dim=1) / math.sqrt(m)
            if mask is not None and mask.additive.shape[1] not in (1, view):
                raise ValueError(
                    f"a mask of {mask.additive.shape[1]} heads cannot go through a view of "
                    f"{view} heads: a view takes masks shared by all heads"
                )
        if softcap is not None:
            s = torch.tanh(s / softcap) * softcap
        if mask is not None:
            s = mask.add_to(s) if inplace else s + mask.additive
    if sites is not None:
        s = sites("scores", s)
    p = softmax_with_sinks(s, sinks, inplace=inplace)
    if mask is not None and mask.keep is not None:
        p = p.mul_(mask.keep) if inplace else p * mask.keep
    return s, p


def scaled_masked(q: Tensor, k: Tensor, scale: float, mask: MergedMask | None) -> Tensor:
    """scale * q k^T + mask, in one product where the shapes allow (``baddbmm``: one batch
    element, one K/V head per query head, a whole-width mask without a batch dimension): the
    scale and the mask enter the product itself, so q is never rescaled in a pass of its own
    (measured: 3 to 13% of the block loop at batch 8 x 256 tokens over four runs, nothing at
    1 x 2048)."""
    batch, heads, rows, _ = q.shape
    keys = k.shape[-2]
    additive = None if mask is None else mask.additive
    if (
        batch == 1
        and k.shape[1] == heads
        and (mask is None or (mask.first == 0 and additive.shape[0] == 1))
    ):
        shape = (heads, rows, keys)
        base = q.new_zeros(()).expand(shape) if additive is None else additive[0].expand(shape)
        beta = 0.0 if additive is None else 1.0
        s = torch.baddbmm(base, q[0], k[0].transpose(-2, -1), beta=beta, alpha=scale)
        return s.unsqueeze(0)
    s = grouped_matmul(q * scale, k.transpose(-2, -1))
    return s if mask is None else mask.add_to(s)

"""Attention whose weights come back averaged over heads, with a backward written for it.

``forward(need_weights=True)`` with torch's default ``average_attn_weights=True`` returns the head
outputs and the weights averaged over heads, (batch, q_pos, k_pos). The per-head weights
(batch, head, q_pos, k_pos) are the big tensor (200 MB at 12 heads x 2048 tokens). In training,
``AveragedAttention`` computes them once with the kernel's math in place
(``block.block_weights``) and differentiates by hand (dO, dmean the upstream gradients):

    dP = (dO V^T + dmean / head) * keep              one tensor, updated in place
    dS = P * (dP - rowsum(dP * P))                   softmax backward, in place
    dQ = scale dS K;   dK = scale dS^T Q;   dV = P^T dO

(autograd's graph for the same math allocates the scores, the softmax output, dP twice and dS).
A row with no visible key has keep = 0 and P = 0 there, so dS is 0 there as it should be. With
grouped K/V heads the products run per group (``block.grouped_matmul``): dK and dV sum over
the query heads of a group without K or V ever being repeated. Without grad the kernel's
chunked path serves the same weights one block of rows at a time. The mask gets no gradient;
the explicit path serves a mask that requires one, dropout, and double backward (this function
is once differentiable).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from headlab.attention.block import block_weights, grouped_matmul
from headlab.attention.mask_spec import MergedMask


def _grouped_t(a: Tensor, b: Tensor, groups: int) -> Tensor:
    """a (batch, head, q, x)^T @ b (batch, head, q, y) summed over each group of query heads
    -> (batch, kv_head, x, y)."""
    batch, heads, q_len, x = a.shape
    m = heads // groups
    a = a.reshape(batch, groups, m * q_len, x)
    b = b.reshape(batch, groups, m * q_len, b.shape[-1])
    return a.transpose(-2, -1) @ b


class AveragedAttention(torch.autograd.Function):
    """(q, k, v, mask, scale) -> (head_out (batch, head, q_pos, d_head), mean weights
    (batch, q_pos, k_pos)); q (batch, head, q_pos, d_head), k and v (batch, kv_head, k_pos,
    d_head), mask a whole ``MergedMask`` or None."""

    @staticmethod
    def forward(ctx, q, k, v, mask: MergedMask | None, scale: float):
        # Contiguous once: every operand is used in two products (forward and backward), and
        # matmul would copy a strided one (split heads are strided views) each time.
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        _, p = block_weights(
            q, k, mask, scale=scale, softcap=None, sinks=None, view=None, inplace=True
        )  # (batch, head, q_pos, k_pos)
        keep = None if mask is None else mask.keep
        ctx.save_for_backward(q, k, v, p, keep)
        ctx.scale = scale
        return grouped_matmul(p, v), p.mean(dim=1)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_mean):
        q, k, v, p, keep = ctx.saved_tensors
        groups = k.shape[1]
        no_out = d_out is None
        d_out = None if no_out else d_out.contiguous()
        d_p = torch.zeros_like(p) if no_out else grouped_matmul(d_out, v.transpose(-2, -1))
        if d_mean is not None:
            d_p.add_(d_mean.unsqueeze(1), alpha=1.0 / q.shape[1])
        if keep is not None:
            d_p.mul_(keep)
        torch.ops.aten._softmax_backward_data.out(d_p, p, -1, p.dtype, grad_input=d_p)  # dS
        d_q = grouped_matmul(d_p, k).mul_(ctx.scale)
        d_k = _grouped_t(d_p, q, groups).mul_(ctx.scale)  # dS^T Q scale, summed per group
        d_v = None if no_out else _grouped_t(p, d_out, groups)
        return d_q, d_k, d_v, None, None

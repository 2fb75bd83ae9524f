"""The default path: attention whose weights come back averaged over heads.

``forward(need_weights=True)`` with torch's default ``average_attn_weights=True`` returns the head
outputs and the weights averaged over heads, (batch, q_pos, k_pos). The per-head weights
(batch, head, q_pos, k_pos) are the big tensor (200 MB at 12 heads x 2048 tokens); this file
computes the same values as ``explicit_attention`` with fewer passes over it:

    P = softmax(Q K^T / sqrt(D) + M) * keep         one tensor, softmax in place
    O = P V;   mean = P.mean(head)

and, in training, a backward written for it (dO, dmean the upstream gradients):

    dP = (dO V^T + dmean / head) * keep              one tensor, updated in place
    dS = P * (dP - rowsum(dP * P))                   softmax backward, in place
    dQ = dS K / sqrt(D);   dK = dS^T Q / sqrt(D);   dV = P^T dO

(autograd's graph for the same math allocates the scores, the softmax output, dP twice and dS).
A row with no visible key has keep = 0 and P = 0 there, so dS is 0 there as it should be.
Without grad and with large weights, ``blocked_mean_attention`` goes further: it computes P one
block of query rows at a time, small enough to stay in cache, and never holds it whole.

Masks enter as MergedMask tensors and get no gradient; the explicit path serves a mask that
requires one, dropout, and double backward (AveragedAttention is once differentiable).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

# A block is one batch element's heads over ``rows`` query rows: head * rows * k_pos weights of
# about BLOCK_ELEMENTS (1 MiB in float32), but never fewer than MIN_ROWS rows: BLAS is slow on
# thinner matrices (measured: 16 rows cost 10x more than 64 at seq 2048).
BLOCK_ELEMENTS = 2**18
MIN_ROWS = 64
# Below this many per-head weights (batch * head * q_pos * k_pos) blocking does not pay: the whole
# tensor is about as fast, and the loop's Python overhead shows.
MIN_BLOCKED = 2**20


def _weights(
    q: Tensor, kt: Tensor, additive: Tensor | None, keep: Tensor | None, *, scaled: bool = False
) -> Tensor:
    """softmax(q kt / sqrt(d_head) + additive) * keep, computed in one new tensor (q already
    divided by sqrt(d_head) when ``scaled``)."""
    p = torch.matmul(q if scaled else q * q.shape[-1] ** -0.5, kt)  # (..., q_pos, k_pos)
    if additive is not None:
        p.add_(additive)
    return _softmax_keep(p, keep)


def _block_weights(q: Tensor, kt: Tensor, additive: Tensor | None, keep: Tensor | None) -> Tensor:
    """``_weights`` for one block, q (head, rows, d_head) unscaled: the scale and the mask enter
    the product itself (baddbmm's alpha and input), so q is never rescaled in a pass of its own
    (measured: 3 to 13% of the block loop at batch 8 x 256 tokens over four runs, nothing at
    1 x 2048)."""
    shape = (q.shape[0], q.shape[1], kt.shape[-1])  # (head, rows, k_pos)
    base = q.new_zeros(()).expand(shape) if additive is None else additive
    beta = 0.0 if additive is None else 1.0
    p = torch.baddbmm(base, q, kt, beta=beta, alpha=q.shape[-1] ** -0.5)
    return _softmax_keep(p, keep)


def _softmax_keep(p: Tensor, keep: Tensor | None) -> Tensor:
    """softmax over the last axis, in place, then rows with no visible key zeroed by keep."""
    torch.softmax(p, dim=-1, out=p)
    if keep is not None:
        p.mul_(keep)
    return p


class AveragedAttention(torch.autograd.Function):
    """(q, k, v, additive, keep) -> (head_out (batch, head, q_pos, d_head), mean weights
    (batch, q_pos, k_pos)); q, k, v (batch, head, pos, d_head) with K/V heads expanded;
    additive (b|1, h|1, q_pos|1, k_pos) and keep (b|1, h|1, q_pos|1, 1) or None."""

    @staticmethod
    def forward(ctx, q, k, v, additive, keep):
        # Contiguous once: every operand is used in two products (forward and backward), and
        # matmul would copy a strided one (split heads are strided views) each time.
        q_s = q * q.shape[-1] ** -0.5  # Q / sqrt(D), contiguous
        k, v = k.contiguous(), v.contiguous()
        p = _weights(q_s, k.transpose(-2, -1), additive, keep, scaled=True)  # (b, h, q, k)
        ctx.save_for_backward(q_s, k, v, p, keep)
        ctx.scale = q.shape[-1] ** -0.5
        return torch.matmul(p, v), p.mean(dim=1)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_mean):
        q_s, k, v, p, keep = ctx.saved_tensors
        no_out = d_out is None
        d_out = None if no_out else d_out.contiguous()
        d_p = torch.zeros_like(p) if no_out else torch.matmul(d_out, v.transpose(-2, -1))
        if d_mean is not None:
            d_p.add_(d_mean.unsqueeze(1), alpha=1.0 / q_s.shape[1])
        if keep is not None:
            d_p.mul_(keep)
        torch.ops.aten._softmax_backward_data.out(d_p, p, -1, p.dtype, grad_input=d_p)  # dS
        d_q = torch.matmul(d_p, k).mul_(ctx.scale)
        d_k = torch.matmul(d_p.transpose(-2, -1), q_s)  # dS^T Q / sqrt(D)
        d_v = None if no_out else torch.matmul(p.transpose(-2, -1), d_out)
        return d_q, d_k, d_v, None, None


def _block(t: Tensor | None, b: int, rows: slice) -> Tensor | None:
    """Batch element b's rows of a (b|1, h|1, q_pos|1, k) mask tensor; size-1 dims stay, to
    broadcast against (head, rows, k_pos)."""
    if t is None:
        return None
    t = t[b if t.shape[0] > 1 else 0]
    return t if t.shape[-2] == 1 else t[:, rows]


def blocked_mean_attention(
    q: Tensor, k: Tensor, v: Tensor, additive: Tensor | None, keep: Tensor | None
) -> tuple[Tensor, Tensor]:
    """AveragedAttention's forward without autograd, one block of query rows at a time."""
    batch, heads, q_len, d_head = q.shape
    k_len = k.shape[2]
    # head_out is written position-major, (batch, q_pos, head, d_head), and returned as its
    # (batch, head, q_pos, d_head) view: merging the heads for W_O is then free.
    out = q.new_empty(batch, q_len, heads, d_head)
    mean = q.new_empty(batch, q_len, k_len)
    step = min(q_len, max(MIN_ROWS, BLOCK_ELEMENTS // (heads * k_len)))
    for b in range(batch):
        kt = k[b].transpose(-2, -1)  # (head, d_head, k_pos)
        for start in range(0, q_len, step):
            rows = slice(start, start + step)
            p = _block_weights(
                q[b, :, rows], kt, _block(additive, b, rows), _block(keep, b, rows)
            )  # (head, rows, k_pos)
            out[b, rows] = torch.bmm(p, v[b]).transpose(0, 1)  # (rows, head, d_head)
            torch.mean(p, dim=0, out=mean[b, rows])  # (rows, k_pos)
    return out.transpose(1, 2), mean


def mean_attention(
    q: Tensor, k: Tensor, v: Tensor, additive: Tensor | None, keep: Tensor | None
) -> tuple[Tensor, Tensor]:
    """(head_out, weights averaged over heads); see the module docstring. K/V heads expanded.
    For CPU tensors (functional.attend sends no others): the blocks are sized for a CPU cache."""
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if needs_grad:
        return AveragedAttention.apply(q, k, v, additive, keep)
    with torch.no_grad():
        if q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] >= MIN_BLOCKED:
            return blocked_mean_attention(q, k, v, additive, keep)
        p = _weights(q, k.transpose(-2, -1), additive, keep)  # small: whole, no autograd
        return torch.matmul(p, v), p.mean(dim=1)

"""The two SDPA paths of the kernel (``kernel.attend`` chooses among them and the others):

fused    torch's ``scaled_dot_product_attention``, the mask materialised once unless plain
         causality is enough;
banded   a causal layer with a ``KeyBudget``: every head fused, then each budgeted head again
         over the keys it keeps, a block of queries at a time.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.attention.mask_spec import MaskSpec, MergedMask, outside_window


def fused(
    q: Tensor, k: Tensor, v: Tensor, mask: MaskSpec | None, *, scale: float, dropout_p: float
) -> Tensor:
    """SDPA; the mask materialised once unless plain causality is enough."""
    group = int(q.shape[1]) // int(k.shape[1])
    if group != 1 and torch.jit.is_tracing():  # the ONNX exporter has no SDPA with enable_gqa
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        group = 1
    causal = mask is not None and mask.plain_causal
    merged = None if causal else whole_mask(mask, q, k)
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=None if merged is None else merged.additive,
        dropout_p=dropout_p,
        is_causal=causal,
        scale=scale,
        enable_gqa=group != 1,
    )
    if merged is not None and merged.keep is not None:
        out = out * merged.keep
    return out


def banded(q: Tensor, k: Tensor, v: Tensor, mask: MaskSpec, *, scale: float) -> Tensor:
    """head_out (batch, head, q_pos, d_value) of a causal layer with a ``KeyBudget``: every head
    fused with plain causality, then each budgeted head again over the keys it keeps, a block
    of max(64, window) queries at a time: its sinks and the keys from the block's first query's
    window on. The budgeted heads cost O(q_pos x (sinks + 2 window)), not O(q_pos^2); a block's
    mask is ``MaskSpec``'s window on those key positions (one definition of the kept keys)."""
    budget = mask.budget
    out = fused(q, k, v, replace(mask, budget=None), scale=scale, dropout_p=0.0)
    heads = budget.heads.to(q.device).nonzero()[:, 0]  # (budgeted,)
    if not len(heads):
        return out
    kv = heads // (q.shape[1] // k.shape[1])  # each budgeted head's K/V head
    q_b, k_b, v_b = q[:, heads], k[:, kv], v[:, kv]  # (batch, budgeted, pos, d)
    sinks, size = budget.sinks, budget.window
    step = max(64, size)
    for start in range(0, q.shape[2], step):
        stop = min(start + step, q.shape[2])
        low = max(sinks, start - size + 1)  # the first key of the band any row here sees
        keys = torch.cat(
            [
                torch.arange(min(sinks, low, stop), device=q.device),
                torch.arange(min(low, stop), stop, device=q.device),
            ]
        )
        positions = torch.arange(start, stop, device=q.device)
        after = keys[None, None, None, :] > positions[None, None, :, None]  # causality
        hidden = after | outside_window(positions, keys, size, sinks, None, causal=True)
        block = MaskSpec(attn_mask=hidden)  # (1, 1, rows, keys), True hidden
        out[:, heads, start:stop] = fused(
            q_b[:, :, start:stop],
            k_b[:, :, keys],
            v_b[:, :, keys],
            block,
            scale=scale,
            dropout_p=0.0,
        )
    return out


def whole_mask(mask: MaskSpec | None, q: Tensor, k: Tensor) -> MergedMask | None:
    """Every row of ``mask`` over every key of ``k``, for the paths that hold whole scores."""
    if mask is None:
        return None
    return mask.block(0, q.shape[2], k.shape[2], dtype=q.dtype, device=q.device)

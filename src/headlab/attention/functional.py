"""Helpers around the kernel: heads split and merged, K/V heads expanded, the entropy of rows.

The attention math itself is ``headlab.attention.kernel``. With grouped K/V heads (GQA/MQA) query
head i reads K/V head i // group, group = head // kv_head: consecutive query heads share a K/V
head, as in Llama's ``repeat_kv``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def entropy(p: Tensor, dim: int = -1) -> Tensor:
    """-sum_k p_k ln p_k over ``dim`` (nats), with 0 ln 0 = 0: the entropy of attention rows
    (batch, head, q_pos, k_pos) -> (batch, head, q_pos), or of any distribution along ``dim``.

    The one definition headlab uses, also in the streaming statistics
    (``headlab.attention.streaming_sums``)."""
    if p.dtype not in (torch.float32, torch.float64):  # low precision: exact at subnormals
        return -torch.special.xlogy(p, p).sum(dim)
    # ln p with torch's vectorised log, not xlogy (whose CPU kernel is scalar: 1.8x slower on a
    # chunk of 4M weights); the clamp leaves every normal p as it is and makes 0 ln 0 = 0.
    log_p = p.clamp(min=torch.finfo(p.dtype).tiny).log_()
    return -log_p.mul_(p).sum(dim)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(batch, pos, head * d_head) -> (batch, head, pos, d_head); also with no
    position or no batch element (d_head from the width, not inferred from the element count)."""
    batch, pos, width = x.shape
    return x.view(batch, pos, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(batch, head, pos, d_head) -> (batch, pos, head * d_head)."""
    batch, heads, pos, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, pos, heads * d_head)


def expand_kv(x: Tensor, group: int) -> Tensor:
    """(batch, kv_head, pos, d_head) -> (batch, kv_head * group, pos, d_head), each K/V head
    repeated for the ``group`` query heads that read it."""
    return x if group == 1 else x.repeat_interleave(group, dim=1)

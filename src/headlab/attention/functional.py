"""Per-head attention in torch: the explicit path (weights visible) and the fused path (SDPA).

    S = Q K^T / sqrt(d_head) + M        (batch, head, q_pos, k_pos)
    P = softmax(S)                      rows sum to one
    O = P V                             (batch, head, q_pos, d_head)

With grouped K/V heads (GQA/MQA) query head i reads K/V head i // (head // kv_head): consecutive
query heads share a K/V head, as in Llama's ``repeat_kv``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from headlab.attention.masks import MergedMask


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(batch, pos, num_heads * d_head) -> (batch, num_heads, pos, d_head)."""
    batch, pos, width = x.shape
    return x.view(batch, pos, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(batch, head, pos, d_head) -> (batch, pos, head * d_head)."""
    batch, heads, pos, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, pos, heads * d_head)


def expand_kv(x: Tensor, num_heads: int) -> Tensor:
    """(batch, kv_head, pos, d_head) -> (batch, head, pos, d_head), each K/V head repeated."""
    group = num_heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: MergedMask | None, *, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor, Tensor]:
    """Attention with every intermediate materialised.

    q: (batch, head, q_pos, d_head); k, v: (batch, kv_head, k_pos, d_head).
    Returns (head_out (batch, head, q_pos, d_head), weights and scores (batch, head, q_pos, k_pos)).
    ``weights`` is returned after dropout, as torch.nn.MultiheadAttention does.
    """
    num_heads = q.shape[1]
    k, v = expand_kv(k, num_heads), expand_kv(v, num_heads)
    # Scale q (q_pos x d_head) rather than the scores (q_pos x k_pos): one pass over the small
    # tensor instead of the big one, and torch's own order of operations.
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores + mask.additive
    weights = scores.softmax(dim=-1)
    if mask is not None and mask.keep is not None:
        weights = weights * mask.keep
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights, scores


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MergedMask | None,
    *,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> Tensor:
    """Attention through ``F.scaled_dot_product_attention``; weights are never materialised.

    Same shapes as ``explicit_attention``; returns head_out (batch, head, q_pos, d_head).
    ``is_causal`` is only passed on when ``mask`` is None (the causal mask was not merged).
    """
    gqa = q.shape[1] != k.shape[1]
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=None if mask is None else mask.additive,
        dropout_p=dropout_p,
        is_causal=is_causal and mask is None,
        enable_gqa=gqa,
    )
    if mask is not None and mask.keep is not None:
        out = out * mask.keep
    return out

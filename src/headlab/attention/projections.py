"""``MultiHeadAttention``'s input projections: inputs -> per-head q, k, v.

With the module's packed ``in_proj_weight`` (rows W_Q, then W_K, then W_V) or its separate
``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight`` (when kdim or vdim differ from
embed_dim), as torch.nn.MultiheadAttention holds them:

    q = x_q W_Q^T + b_Q   (batch, q_pos, head * d_head)     -> (batch, head, q_pos, d_head)
    k = x_k W_K^T + b_K   (batch, k_pos, kv_head * d_head)  -> (batch, kv_head, k_pos', d_head)
    v = x_v W_V^T + b_V   (batch, k_pos, kv_head * d_head)  -> (batch, kv_head, k_pos', d_head)

k_pos' is k_pos plus one key for ``add_bias_kv`` and one for ``add_zero_attn``; rotary positions
(``rotary_base``) rotate q and k after the projection.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headlab.attention.functional import split_heads
from headlab.attention.rotary import apply_rotary

#: headlab's ``attention.module.MultiHeadAttention`` (which imports this module; named here by
#: its base class, so that no import circle forms)
MultiHeadAttention = nn.Module


def _widths(mha: MultiHeadAttention) -> tuple[int, int]:
    """(head * d_head, kv_head * d_head): the widths of q and of k, v."""
    return mha.num_heads * mha.head_dim, mha.num_kv_heads * mha.head_dim


def projection_weights(mha: MultiHeadAttention) -> tuple[Tensor, Tensor, Tensor]:
    """(W_Q (head*d_head, embed_dim), W_K (kv_head*d_head, kdim), W_V (kv_head*d_head, vdim)) as
    views of the module's parameters."""
    if mha.in_proj_weight is not None:
        q_dim, kv_dim = _widths(mha)
        return mha.in_proj_weight.split([q_dim, kv_dim, kv_dim])
    return mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight


def projection_biases(
    mha: MultiHeadAttention,
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """(b_Q (head*d_head,), b_K (kv_head*d_head,), b_V (kv_head*d_head,)), or Nones without bias."""
    if mha.in_proj_bias is None:
        return None, None, None
    q_dim, kv_dim = _widths(mha)
    return mha.in_proj_bias.split([q_dim, kv_dim, kv_dim])


def project(
    mha: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """(batch, q_pos | k_pos, embed_dim | kdim | vdim) inputs -> q (batch, head, q_pos, d_head),
    k and v (batch, kv_head, k_pos', d_head)."""
    q_dim, kv_dim = _widths(mha)
    if query is key and key is value and mha.in_proj_weight is not None:
        # One packed matmul; sizes from ints, not projection_weights(): its six split() calls
        # cost more than the attention itself at small sizes (benchmarks/bench_attention.py).
        qkv = F.linear(query, mha.in_proj_weight, mha.in_proj_bias)
        # (batch, pos, head*d_head), (batch, pos, kv_head*d_head) twice
        q, k, v = qkv.split([q_dim, kv_dim, kv_dim], dim=-1)
    else:
        w_q, w_k, w_v = projection_weights(mha)
        b_q, b_k, b_v = projection_biases(mha)
        q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
    if mha.bias_k is not None:
        batch = q.shape[0]
        # (batch, k_pos + 1, kv_head*d_head): one more key and value, learned
        k = torch.cat([k, mha.bias_k.expand(batch, 1, -1)], dim=1)
        v = torch.cat([v, mha.bias_v.expand(batch, 1, -1)], dim=1)
    q = split_heads(q, mha.num_heads)  # (batch, head, q_pos, d_head)
    k = split_heads(k, mha.num_kv_heads)  # (batch, kv_head, k_pos (+1 with bias_k), d_head)
    v = split_heads(v, mha.num_kv_heads)  # likewise
    if mha.add_zero_attn:
        # (batch, kv_head, k_pos', d_head): one more key and value, zero
        k, v = F.pad(k, (0, 0, 0, 1)), F.pad(v, (0, 0, 0, 1))
    if mha.rotary_base is not None:  # rotated by position, before any intervention sees them
        q, k = apply_rotary(q, mha.rotary_base), apply_rotary(k, mha.rotary_base)
    return q, k, v

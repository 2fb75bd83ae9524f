"""Per-head attention in torch: the explicit path (weights visible) and the fused path (SDPA).

    S = Q K^T / sqrt(d_head) + M        (batch, head, q_pos, k_pos)
    P = softmax(S)                      rows sum to one
    O = P V                             (batch, head, q_pos, d_head)

With grouped K/V heads (GQA/MQA) query head i reads K/V head i // group, group = head // kv_head:
consecutive query heads share a K/V head, as in Llama's ``repeat_kv``. Group sizes are passed as
ints from the module's configuration, never read off tensor shapes, so that the code traces
(torch.jit.trace, ONNX) and compiles without data-dependent branches.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.attention.averaged import mean_attention
from headlab.attention.layout import static_graph
from headlab.attention.masks import MergedMask

#: An intervention point: (site name, tensor) -> the tensor to use from there on.
Site = Callable[[str, Tensor], Tensor]


def entropy(p: Tensor, dim: int = -1) -> Tensor:
    """-sum_k p_k ln p_k over ``dim`` (nats), with 0 ln 0 = 0: the entropy of attention rows
    (batch, head, q_pos, k_pos) -> (batch, head, q_pos), or of any distribution along ``dim``.

    The one definition headlab uses; the streaming statistics compute the same number from the
    softmax's log Z (``headlab.attention.streaming``, tested against this)."""
    return -torch.special.xlogy(p, p).sum(dim)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(batch, pos, num_heads * d_head) -> (batch, num_heads, pos, d_head)."""
    batch, pos, _ = x.shape
    return x.view(batch, pos, num_heads, -1).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(batch, head, pos, d_head) -> (batch, pos, head * d_head)."""
    batch, _, pos, _ = x.shape
    return x.transpose(1, 2).reshape(batch, pos, -1)


def expand_kv(x: Tensor, group: int) -> Tensor:
    """(batch, kv_head, pos, d_head) -> (batch, kv_head * group, pos, d_head), each K/V head
    repeated for the ``group`` query heads that read it."""
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def explicit_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MergedMask | None,
    *,
    group: int = 1,
    dropout_p: float = 0.0,
    site: Site | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Attention with every intermediate materialised.

    q: (batch, head, q_pos, d_head); k, v: (batch, kv_head, k_pos, d_head), head = kv_head *
    group. ``site`` (optional) sees and may replace the scores and the weights.
    Returns (head_out (batch, head, q_pos, d_head), weights and scores (batch, head, q_pos, k_pos)).
    ``weights`` is returned after dropout, as torch.nn.MultiheadAttention does.
    """
    k, v = expand_kv(k, group), expand_kv(v, group)
    # Scale q (q_pos x d_head) rather than the scores (q_pos x k_pos): one pass over the small
    # tensor instead of the big one, and torch's own order of operations.
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores + mask.additive
    if site is not None:
        scores = site("scores", scores)
    weights = scores.softmax(dim=-1)
    if mask is not None and mask.keep is not None:
        weights = weights * mask.keep
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    if site is not None:
        weights = site("weights", weights)
    return weights @ v, weights, scores


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MergedMask | None,
    *,
    group: int = 1,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> Tensor:
    """Attention through ``F.scaled_dot_product_attention``; weights are never materialised.

    Same shapes as ``explicit_attention``; returns head_out (batch, head, q_pos, d_head).
    ``is_causal`` is only passed on when ``mask`` is None (the causal mask was not merged).
    """
    if group != 1 and torch.jit.is_tracing():  # the ONNX exporter has no SDPA with enable_gqa
        k, v, group = expand_kv(k, group), expand_kv(v, group), 1
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=None if mask is None else mask.additive,
        dropout_p=dropout_p,
        is_causal=is_causal and mask is None,
        enable_gqa=group != 1,
    )
    if mask is not None and mask.keep is not None:
        out = out * mask.keep
    return out


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MergedMask | None,
    *,
    path: str,
    group: int,
    dropout_p: float,
    is_causal: bool,
    site: Site | None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The kernel for one call: (head_out, weights, scores).

    path "fused": SDPA, no weights. "averaged": weights averaged over heads (batch, q_pos,
    k_pos) from ``averaged.mean_attention``, no scores; it falls back to "explicit" (the weights
    are then per head) with dropout, intervention sites, a mask that requires grad, off the CPU
    (on an H100 it was no faster than the explicit path: its gain is fewer passes over memory),
    or while a graph is recorded (jit.trace, export, compile: the custom autograd function and
    the block loop are eager-only). "explicit": per-head weights and scores (batch, head,
    q_pos, k_pos).
    """
    if path == "fused":
        out = fused_attention(q, k, v, mask, group=group, dropout_p=dropout_p, is_causal=is_causal)
        return out, None, None
    additive, keep = (None, None) if mask is None else (mask.additive, mask.keep)
    if (
        path == "averaged"
        and dropout_p == 0.0
        and site is None
        and not (additive is not None and additive.requires_grad)
        and q.device.type == "cpu"
        and not static_graph()
    ):
        out, weights = mean_attention(q, expand_kv(k, group), expand_kv(v, group), additive, keep)
        return out, weights, None
    return explicit_attention(q, k, v, mask, group=group, dropout_p=dropout_p, site=site)

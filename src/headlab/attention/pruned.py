"""Heads removed from an attention module's weights: ``prune_attention`` and ``NoHeads``.

Removing query head i of a layer deletes its rows of W_Q (and b_Q) and its columns of W_O. With
grouped K/V heads a K/V head goes when the last query head that reads it goes. When the kept
query heads no longer split evenly over the kept K/V heads, each kept query head gets a copy of
its K/V rows (``MultiHeadAttention`` groups evenly); ``duplicated_kv_heads`` counts the copies
so that parameter counts can skip them. A layer that loses every head outputs ``out_proj.bias``
alone (or zero): ``NoHeads``. The pruned module computes exactly what the original computes with
those heads' mask set to 0 (tested).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from headlab.attention.module import MultiHeadAttention
from headlab.attention.sites import Sites
from headlab.attention.trace import AttentionTrace


class NoHeads(nn.Module):
    """The attention block of a layer whose every head was pruned: it outputs W_O's bias only.

    With no heads, concat(heads) is empty and out_proj(empty) = out_proj.bias at every position.
    """

    num_heads = 0
    num_kv_heads = 0
    head_dim = 0

    def __init__(self, bias: Tensor) -> None:
        super().__init__()
        self.bias = nn.Parameter(bias.detach().clone())
        self.embed_dim = bias.shape[0]
        self.sites = Sites()  # nothing to intervene on: no call reaches the kernel

    def query_key_weights(self) -> tuple[Tensor, Tensor]:
        raise ValueError("this layer has no heads left: it has no W_Q or W_K")

    def forward(self, x: Tensor, *args: object, **kwargs: object) -> tuple[Tensor, None]:
        """x: (batch, pos, d_model) -> ((batch, pos, d_model) the bias everywhere, None); called
        like a MultiHeadAttention (key, value, masks and head_mask change nothing)."""
        return self.bias.expand_as(x), None

    def trace(self, x: Tensor, *args: object, **kwargs: object) -> AttentionTrace:
        """A trace with zero heads: per-head tensors have head = 0."""
        batch, pos, e = x.shape
        empty = x.new_zeros(batch, 0, pos, 0)
        square = x.new_zeros(batch, 0, pos, pos)
        return AttentionTrace(
            q=empty,
            k=empty,
            v=empty,
            scores=square,
            weights=square,
            head_outputs=empty,
            contributions=x.new_zeros(batch, 0, pos, e),
            output=self.forward(x)[0],
        )


def prune_attention(
    attention: MultiHeadAttention, remove: set[int]
) -> MultiHeadAttention | NoHeads:
    """A new attention block without the query heads in ``remove`` (parameters copied).

    Keeps rotary positions, causality, head size and K/V grouping; ValueError for a head index
    out of range, separate q/k/v projections or add_bias_kv.
    """
    heads, kv_heads, d = attention.num_heads, attention.num_kv_heads, attention.head_dim
    bad = [i for i in remove if not 0 <= i < heads]
    if bad:
        raise ValueError(f"head indices must be in [0, {heads}), got {sorted(bad)}")
    if attention.in_proj_weight is None or attention.bias_k is not None:
        raise ValueError("pruning needs packed in_proj weights and no add_bias_kv")
    keep = [i for i in range(heads) if i not in remove]
    bias = attention.out_proj.bias
    if not keep:
        return NoHeads(bias if bias is not None else torch.zeros(attention.embed_dim))
    group = heads // kv_heads
    kv_of = [i // group for i in keep]  # the K/V head each kept query head reads
    kv_keep = sorted(set(kv_of))
    even = len(keep) % len(kv_keep) == 0 and all(
        kv_of[j] == kv_keep[j // (len(keep) // len(kv_keep))] for j in range(len(keep))
    )
    kv_rows = kv_keep if even else kv_of  # uneven groups: one K/V copy per kept query head

    def rows(indices: list[int], start: int) -> torch.Tensor:
        return torch.cat([torch.arange(start + i * d, start + (i + 1) * d) for i in indices])

    q_dim, kv_dim = heads * d, kv_heads * d
    q_rows = rows(keep, 0)
    selected = torch.cat([q_rows, rows(kv_rows, q_dim), rows(kv_rows, q_dim + kv_dim)])
    new = MultiHeadAttention(
        attention.embed_dim,
        len(keep),
        bias=attention.in_proj_bias is not None,
        head_dim=d,
        num_kv_heads=len(kv_rows),
        batch_first=attention.batch_first,
        rotary_base=attention.rotary_base,
        causal=attention.causal,
        dtype=attention.in_proj_weight.dtype,
    )
    with torch.no_grad():
        new.in_proj_weight.copy_(attention.in_proj_weight[selected])
        if attention.in_proj_bias is not None:
            new.in_proj_bias.copy_(attention.in_proj_bias[selected])
            new.out_proj.bias.copy_(attention.out_proj.bias)
        new.out_proj.weight.copy_(attention.out_proj.weight[:, q_rows])
    new.duplicated_kv_heads = len(kv_rows) - len(kv_keep)
    return new.train(attention.training)

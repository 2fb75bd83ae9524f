"""Multi-head attention as the Annotated Transformer writes it (the first seed question's code).

The baseline of benchmarks/bench_attention.py: four nn.Linear layers (W_Q, W_K, W_V, W_O),
view/transpose into heads, an explicit softmax, weights always materialised. Batch first.
Kept close to harvardnlp/annotated-transformer on purpose (including masked_fill with -1e9),
minus the state kept on the module (the weights are returned instead of stored on self.attn).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V; mask == 0 means may not attend (Annotated's convention)."""
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, value), p_attn


class AnnotatedMultiHeadAttention(nn.Module):
    """h heads of d_model // h; inputs and output (batch, pos, d_model)."""

    def __init__(self, h: int, d_model: int) -> None:
        super().__init__()
        if d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by h={h}")
        self.d_k, self.h = d_model // h, h
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        if mask is not None:
            mask = mask.unsqueeze(1)  # same mask for every head
        nbatches = query.size(0)
        # (batch, pos, d_model) -> (batch, h, pos, d_k)
        query, key, value = (
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value), strict=False)
        )
        x, p_attn = attention(query, key, value, mask=mask)
        # (batch, h, pos, d_k) -> (batch, pos, d_model)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x), p_attn

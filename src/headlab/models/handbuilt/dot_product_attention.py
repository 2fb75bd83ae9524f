"""Scaled dot-product attention as one pure function, the math above the code.

weights = softmax(q k^T / sqrt(d_head) + mask)       mask: 0 where allowed, -inf elsewhere
out     = weights v
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> tuple[Tensor, Tensor]:
    """q: (batch, head, q_pos, d_head); k, v: (batch, head, k_pos, d_head); allowed: bool,
    broadcast to (batch, head, q_pos, k_pos), True where a query may attend to a key (every
    query row must allow one key). Returns (out (batch, head, q_pos, d_head), weights
    (batch, head, q_pos, k_pos))."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (batch, head, q_pos, k_pos)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights

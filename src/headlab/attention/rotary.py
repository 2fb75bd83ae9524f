"""Rotary position embedding (RoPE; Su et al. 2021), in the Llama convention.

Each head's query and key vectors are rotated by an angle that grows with the position, in
pairs of dimensions (i, i + d_head/2) ("rotate half", as transformers' Llama and llama.cpp's
converted checkpoints use):

    theta_i = base^(-2i / d_head)                       i = 0 .. d_head/2 - 1
    q'[..., i]            = q[..., i] cos(p theta_i) - q[..., i + d/2] sin(p theta_i)
    q'[..., i + d/2]      = q[..., i + d/2] cos(p theta_i) + q[..., i] sin(p theta_i)

so q'_p . k'_s depends on p - s only. Angles are computed in float32 whatever the input dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.attention.layout import shape_check


@shape_check
def rotary_angles(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (pos, head_dim) float32, for integer ``positions`` (pos,)."""
    if head_dim % 2:
        raise ValueError(f"rotary positions need an even head_dim, got {head_dim}")
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32)[:, None] * inv_freq.to(positions.device)[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)  # (pos, head_dim)
    return angles.cos(), angles.sin()


def rotate_half(x: Tensor) -> Tensor:
    """(..., d) -> (..., d): the second half negated and moved first, the first half second."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: Tensor, base: float, offset: int = 0) -> Tensor:
    """Rotate ``x`` (batch, head, pos, d_head) by positions offset .. offset + pos - 1."""
    positions = torch.arange(offset, offset + x.shape[-2], device=x.device)
    cos, sin = rotary_angles(positions, x.shape[-1], base)
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)

"""Rotary positions as matrices, for the rotary-aware composition scores (``circuits.composition``).

With rotary (Su et al. 2021) a query at position i and a key at position j are rotated before
their dot product: q_i = R(i) W_Q x_i, k_j = R(j) W_K x_j, so the score is
x_i^T W_Q^T R(i)^T R(j) W_K x_j. For the usual rotations R(i)^T R(j) depends on j - i alone,
so the bilinear form of a head at relative offset delta = i - j (the key delta positions before
the query) is

    W_QK(delta) = (R(delta) W_Q)^T (R(0) W_K),

and W_QK(0) = W_Q^T W_K up to the family's scalar ``attention_scaling`` (which no normalised
score sees): the score without rotary is the score at offset 0.

R(p) is built from the family's own code, as the model gives it (``rotary_tables``; the
transformers route: ``models/hf/rotary_tables.py``): its cos and sin tables at position p
(frequencies, scaling types and ``attention_scaling`` included) and its ``rotate_half`` (the
convention of Llama, Mistral, Qwen, Gemma, GPT-NeoX: dimension k pairs with k + d_rot / 2),
applied to the identity:
R(p) e = e cos(p) + rotate_half(e) sin(p). With partial rotary (GPT-NeoX, Phi) the tables cover
the first d_rot dimensions and R is the identity on the rest. Families that rotate otherwise
(GPT-J's interleaved pairs), carry several rotary tables (Gemma 3's local and global layers) or
none are refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from headlab.models.interface import HeadModel


def rotations(model: HeadModel, offsets: Sequence[int], head_dim: int) -> Tensor:
    """(offset, 2, d_head, d_head) float64: for each relative offset delta, (R(delta), R(0)),
    the rotations of the query at position delta and of the key at position 0 (module
    docstring). ValueError (one line) for an offset outside 0..max_positions - 1 or a family
    whose rotary this does not read."""
    offsets = [int(o) for o in offsets]
    if not offsets:
        raise ValueError("offsets must name at least one relative offset, got none")
    limit = model.max_positions
    bad = [o for o in offsets if not 0 <= o < limit]
    if bad:
        raise ValueError(
            f"offsets must lie in 0..{limit - 1} (the model's positions), got {bad[0]}"
        )
    tables = getattr(model, "rotary_tables", None)
    if tables is None:
        raise ValueError(
            f"rotary offsets need a model with rotary positions; {model.name} has none"
        )
    cos, sin, rotate_half = tables(torch.tensor([0, *offsets]), head_dim)  # (1 + offset, d_rot)
    d_rot = cos.shape[-1]
    if d_rot > head_dim or d_rot % 2:
        raise ValueError(f"rotary tables of width {d_rot} do not fit heads of {head_dim}")
    eye = torch.eye(d_rot, dtype=torch.float64)  # rows: the basis vectors e
    out = torch.eye(head_dim, dtype=torch.float64).repeat(len(offsets), 2, 1, 1)
    turned = rotate_half(eye)
    for n in range(len(offsets)):
        for side, p in enumerate((1 + n, 0)):  # the query at delta, the key at 0
            rows = eye * cos[p] + turned * sin[p]  # row e: R(p) e
            out[n, side, :d_rot, :d_rot] = rows.t()
    return out


__all__ = ["rotations"]

"""Masks in torch.nn.MultiheadAttention's formats, checked and merged into one additive mask.

Convention (torch's): in a boolean mask ``True`` means *may not attend*; a float mask is added to
the scores. Everything is merged into one float mask of shape ``(batch|1, head|1, q_pos, k_pos)``.

A query row whose keys are all masked gets zero weights and a zero output in headlab (torch gives
NaN there). ``merge_masks`` reports such rows in ``keep`` so that the attention code can zero them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention.layout import shape_check, static_graph


@dataclass(frozen=True)
class MergedMask:
    """One additive mask and the rows that survive it.

    additive: ``(batch|1, head|1, q_pos, k_pos)`` float, ``-inf`` where attention is forbidden;
        rows that were fully masked are set to 0 so that softmax stays finite.
    keep: ``(batch|1, head|1, q_pos, 1)`` float, 0 on fully masked rows, 1 elsewhere; ``None`` when
        no row is fully masked.
    """

    additive: Tensor
    keep: Tensor | None


def _check_mask_dtype(name: str, mask: Tensor) -> None:
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise ValueError(f"{name} must be bool or floating point, got dtype {mask.dtype}")


def _as_additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf")
        )
    return mask.to(dtype)


def causal_mask(q_len: int, k_len: int, device: torch.device | None = None) -> Tensor:
    """Boolean ``(q_pos, k_pos)`` mask, True above the diagonal (query i may not see key j > i)."""
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).triu(1)


@shape_check
def canonical_attn_mask(
    attn_mask: Tensor, *, batch: int, num_heads: int, q_len: int, k_len: int, batched: bool
) -> Tensor:
    """Check ``attn_mask`` against torch's shapes; return it as ``(batch|1, head|1, q_pos, k_pos)``.

    Accepted: ``(q_pos, k_pos)``, or 3-D ``(batch * head, q_pos, k_pos)`` (``(head, q_pos, k_pos)``
    for unbatched input), the batch-major order torch uses.
    """
    _check_mask_dtype("attn_mask", attn_mask)
    if attn_mask.dim() == 2:
        if tuple(attn_mask.shape) != (q_len, k_len):
            raise ValueError(
                f"attn_mask of 2 dims must have shape (q_pos, k_pos)=({q_len}, {k_len}), "
                f"got {tuple(attn_mask.shape)}"
            )
        return attn_mask.view(1, 1, q_len, k_len)
    if attn_mask.dim() == 3:
        lead = batch * num_heads if batched else num_heads
        if tuple(attn_mask.shape) != (lead, q_len, k_len):
            what = "batch * num_heads" if batched else "num_heads"
            raise ValueError(
                f"attn_mask of 3 dims must have shape ({what}, q_pos, k_pos)="
                f"({lead}, {q_len}, {k_len}), got {tuple(attn_mask.shape)}"
            )
        return attn_mask.view(batch, num_heads, q_len, k_len)
    raise ValueError(f"attn_mask must have 2 or 3 dims, got {attn_mask.dim()} dims")


@shape_check
def canonical_key_padding_mask(
    key_padding_mask: Tensor, *, batch: int, k_len: int, batched: bool
) -> Tensor:
    """Check ``key_padding_mask`` ((batch, k_pos), or (k_pos,) unbatched): (batch, 1, 1, k_pos)."""
    _check_mask_dtype("key_padding_mask", key_padding_mask)
    expected = (batch, k_len) if batched else (k_len,)
    if tuple(key_padding_mask.shape) != expected:
        raise ValueError(
            f"key_padding_mask must have shape {expected} ((batch, k_pos) or (k_pos,) unbatched), "
            f"got {tuple(key_padding_mask.shape)}"
        )
    return key_padding_mask.view(batch, 1, 1, k_len)


def merge_masks(
    *,
    attn_mask: Tensor | None,
    key_padding_mask: Tensor | None,
    is_causal: bool,
    batch: int,
    num_heads: int,
    q_len: int,
    k_len: int,
    extra_keys: int,
    batched: bool,
    dtype: torch.dtype,
    device: torch.device,
) -> MergedMask | None:
    """Merge torch-style masks into one additive mask over ``k_len + extra_keys`` keys.

    ``extra_keys`` are the always-visible key columns appended by ``add_bias_kv`` and
    ``add_zero_attn``. ``is_causal`` with no ``attn_mask`` builds the causal mask; with an
    ``attn_mask`` it is a hint, as in torch, and the given mask is used.
    Returns None when nothing is masked.
    """
    parts = []
    if attn_mask is not None:
        parts.append(
            canonical_attn_mask(
                attn_mask,
                batch=batch,
                num_heads=num_heads,
                q_len=q_len,
                k_len=k_len,
                batched=batched,
            )
        )
    elif is_causal:
        parts.append(causal_mask(q_len, k_len, device).view(1, 1, q_len, k_len))
    if key_padding_mask is not None:
        parts.append(
            canonical_key_padding_mask(key_padding_mask, batch=batch, k_len=k_len, batched=batched)
        )
    if not parts:
        return None
    additive = _as_additive(parts[0], dtype)
    for part in parts[1:]:
        additive = additive + _as_additive(part, dtype)
    if extra_keys:
        additive = torch.nn.functional.pad(additive, (0, extra_keys))
    dead = (additive == float("-inf")).all(dim=-1, keepdim=True)  # (b|1, h|1, q_pos, 1)
    # Eagerly, skip ``keep`` when no row is dead (the common case, one pass less). A recorded
    # graph (jit.trace, export, compile) may not branch on values: it always carries ``keep``.
    if not static_graph() and not bool(dead.any()):
        return MergedMask(additive=additive, keep=None)
    return MergedMask(
        additive=additive.masked_fill(dead, 0.0),
        keep=(~dead).to(dtype),
    )

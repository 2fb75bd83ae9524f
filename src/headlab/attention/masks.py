"""Masks in torch.nn.MultiheadAttention's formats, checked and described as one ``MaskSpec``.

Convention (torch's): in a boolean mask ``True`` means *may not attend*; a float mask is added to
the scores. ``torch_mask_spec`` checks the shapes torch accepts and returns the ``MaskSpec`` the
kernel builds its blocks from (``headlab.attention.mask_spec``, where fully masked rows get zero
weights and a zero output; torch gives NaN there).
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.attention.layout import shape_check
from headlab.attention.mask_spec import MaskSpec


def _check_mask_dtype(name: str, mask: Tensor) -> None:
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise ValueError(f"{name} must be bool or floating point, got dtype {mask.dtype}")


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


def _as_float(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (True hidden) as an additive one (-inf hidden); a float one as it is."""
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, -torch.inf)


def torch_mask_spec(
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
    always_causal: bool = False,
) -> MaskSpec | None:
    """torch.nn.MultiheadAttention's masks, checked, as one ``MaskSpec`` over ``k_len`` keys plus
    ``extra_keys`` always-visible columns (``add_bias_kv``, ``add_zero_attn``).

    ``is_causal`` with no ``attn_mask`` means causal; with an ``attn_mask`` it is a hint, as in
    torch, and the given mask is used. ``always_causal`` (a causal module): causal whatever else
    is given. Returns None when nothing is masked.
    """
    full = None
    if attn_mask is not None:
        full = canonical_attn_mask(
            attn_mask, batch=batch, num_heads=num_heads, q_len=q_len, k_len=k_len, batched=batched
        )
    padding = None
    if key_padding_mask is not None:
        padding = canonical_key_padding_mask(
            key_padding_mask, batch=batch, k_len=k_len, batched=batched
        )
        if padding.dtype != torch.bool:  # a float padding mask is added, like attn_mask
            full = padding if full is None else _as_float(full, padding.dtype) + padding
            padding = None
        else:
            padding = padding.view(batch, k_len)
    causal = always_causal or (is_causal and attn_mask is None)
    if full is None and padding is None and not causal:
        return None
    return MaskSpec(causal=causal, key_padding=padding, attn_mask=full, extra_keys=extra_keys)

"""The mask transformers hands headlab's attention: described, never materialised.

transformers builds each layer type's mask once per forward through ``AttentionMaskInterface``
(``masking_utils.create_causal_mask``, ``create_sliding_window_causal_mask``,
``create_bidirectional_mask``, ...), calling the function registered under the model's
``attn_implementation`` with keywords ``batch_size, q_length, kv_length, q_offset, kv_offset,
mask_function, attention_mask`` (the 2-D padding mask, True = real token), ``local_size``
(sliding windows), ``allow_is_causal_skip``, ``allow_is_bidirectional_skip``, ``use_vmap``,
``device`` (and ``dtype``, ``config``). Its "sdpa" entry expands them into a
(batch, 1, q_length, kv_length) boolean tensor; ``headlab_mask`` keeps them in a ``LazyMask``,
whose ``rows(start, stop)`` builds any block of query rows on demand by calling transformers'
own ``sdpa_mask`` for those rows only, so every block is exactly what transformers would build.

Coordinates: query row i sits at absolute position ``q_offset + i``, key column j at
``kv_offset + j`` (a sliding-window cache keeps only the last keys: kv_offset > 0).

A prepared mask: ``generate`` with a compileable (static) cache builds the mask in advance
through the interface and passes the ``LazyMask`` to the model as its ``attention_mask``; a
Llama-style model hands it to ``create_causal_mask`` again. transformers returns a prepared 4-D
mask as it is; a ``LazyMask`` reads as one (``ndim`` 4, ``shape`` (batch, 1, q_pos, k_pos)) and
``headlab_mask`` returns it as it is, after checking that it describes the same call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from headlab.attention.mask_spec import MaskSpec

#: What the cheap flag can say: every row sees keys up to itself and nothing else ("causal"),
#: every row sees every key ("full"), or the rows must be built ("rows").
KINDS = ("causal", "full", "rows")


@dataclass(frozen=True)
class LazyMask:
    """One mask of one forward, as transformers described it (see the module docstring).

    padding: (batch, >= kv_offset + kv_length) bool, True = real token, or None (no padding).
    kind: the cheap flag, decided once when the mask is made (``KINDS``).
    """

    batch_size: int
    q_length: int
    kv_length: int
    q_offset: int
    kv_offset: int
    mask_function: Callable
    padding: Tensor | None
    use_vmap: bool
    device: torch.device
    kind: str
    #: a prepared mask's rank, where models and transformers tell a 2-D padding mask from it
    ndim: ClassVar[int] = 4

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(batch, 1, q_pos, k_pos): the shape of the boolean mask it describes."""
        return (self.batch_size, 1, self.q_length, self.kv_length)

    def dim(self) -> int:
        return self.ndim

    def allowed(self, start: int, stop: int) -> Tensor:
        """Query rows start..stop-1 in transformers' convention: (batch, 1, stop - start,
        kv_length) bool, True = may attend. Raises ValueError for rows out of range."""
        from transformers.masking_utils import sdpa_mask

        if not 0 <= start < stop <= self.q_length:
            raise ValueError(
                f"rows must satisfy 0 <= start < stop <= q_length={self.q_length}, "
                f"got start={start}, stop={stop}"
            )
        block = sdpa_mask(
            batch_size=self.batch_size,
            q_length=stop - start,
            kv_length=self.kv_length,
            q_offset=self.q_offset + start,
            kv_offset=self.kv_offset,
            mask_function=self.mask_function,
            attention_mask=self.padding,
            allow_is_causal_skip=False,
            allow_is_bidirectional_skip=False,
            use_vmap=self.use_vmap,
            device=self.device,
        )
        return block.expand(self.batch_size, 1, stop - start, self.kv_length)

    def rows(self, start: int, stop: int) -> Tensor:
        """The same block in the kernel's convention: True = may NOT attend."""
        return ~self.allowed(start, stop)

    def spec(self, causal: bool) -> MaskSpec:
        """This mask as the kernel's ``MaskSpec``; ``causal`` is the module's own flag (it only
        matters for the fast kinds: a "rows" mask already holds causality)."""
        q_offset = self.q_offset - self.kv_offset  # key column of query row 0
        if self.kind == "full":
            return MaskSpec()
        if self.kind == "causal":
            return MaskSpec(causal=True, q_offset=q_offset)
        return MaskSpec(causal=causal, q_offset=q_offset, rows=self.rows)


def _all_real(padding: Tensor | None, kv_length: int, kv_offset: int) -> bool:
    if padding is None:
        return True
    window = padding[:, kv_offset : kv_offset + kv_length]
    return window.shape[-1] == kv_length and bool(window.all())


def headlab_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Callable | None = None,
    attention_mask: Tensor | None = None,
    local_size: int | None = None,
    allow_is_causal_skip: bool = True,
    allow_is_bidirectional_skip: bool = False,
    use_vmap: bool = False,
    device: torch.device | str = "cpu",
    config: object = None,
    **_: object,
) -> LazyMask | Tensor:
    """The ``AttentionMaskInterface`` entry: transformers' keywords -> a ``LazyMask``; for a
    model whose own code adds a bias onto the mask it gets back (Falcon with ``alibi``: its
    ``FalconModel.forward`` folds ALiBi into the mask tensor, reading its dtype and values), the
    (batch, 1, q_pos, k_pos) boolean tensor transformers' SDPA mask would be (True = may attend).

    The flag follows transformers' own rules for skipping the mask under SDPA
    (``masking_utils._ignore_causal_mask_sdpa``): "causal" only where transformers allows the
    causal skip (a plain causal pattern), no window can bite (``kv_length < local_size``) and no
    key in range is padding; "full" likewise for a bidirectional pattern.
    """
    from transformers.masking_utils import causal_mask_function, prepare_padding_mask

    if isinstance(attention_mask, LazyMask):  # prepared in advance (generate): kept as it is
        return _prepared(attention_mask, batch_size, q_length, kv_length, q_offset, kv_offset)
    mask_function = causal_mask_function if mask_function is None else mask_function
    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    if getattr(config, "alibi", None) is True:
        from transformers.masking_utils import sdpa_mask

        block = sdpa_mask(
            batch_size=batch_size,
            q_length=q_length,
            kv_length=kv_length,
            q_offset=q_offset,
            kv_offset=kv_offset,
            mask_function=mask_function,
            attention_mask=padding,
            local_size=local_size,
            allow_is_causal_skip=False,
            use_vmap=use_vmap,
            device=device,
        )
        return block.expand(batch_size, 1, q_length, kv_length)
    q_offset, kv_offset = int(q_offset), int(kv_offset)
    unwindowed = local_size is None or kv_length < local_size
    real = _all_real(padding, kv_length, kv_offset)
    kind = "rows"
    if allow_is_causal_skip and unwindowed and real:
        kind = "causal"
    elif allow_is_bidirectional_skip and unwindowed and real:
        kind = "full"
    return LazyMask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        padding=padding,
        use_vmap=use_vmap,
        device=torch.device(device),
        kind=kind,
    )


def _prepared(
    mask: LazyMask, batch_size: int, q_length: int, kv_length: int, q_offset, kv_offset
) -> LazyMask:
    """``mask``, checked to describe the call it is passed to again. Raises ValueError."""
    wanted = (batch_size, q_length, kv_length, int(q_offset), int(kv_offset))
    held = (mask.batch_size, mask.q_length, mask.kv_length, mask.q_offset, mask.kv_offset)
    if held != wanted:
        raise ValueError(
            "the prepared mask describes (batch, q_length, kv_length, q_offset, kv_offset) = "
            f"{held}, the model's call {wanted}"
        )
    return mask


def as_mask_spec(attention_mask: object, causal: bool, q_len: int, k_len: int) -> MaskSpec | None:
    """Whatever transformers passed as ``attention_mask`` -> the kernel's ``MaskSpec``.

    A ``LazyMask`` (the usual case); a ready 4-D tensor (a caller's own mask: bool True = attend,
    or float added); or None, which transformers' SDPA reads as ``is_causal`` for a causal module
    with more than one query row (upper-left aligned) and as no mask otherwise.
    """
    if isinstance(attention_mask, LazyMask):
        if (attention_mask.q_length, attention_mask.kv_length) != (q_len, k_len):
            raise ValueError(
                f"the mask describes {attention_mask.q_length} queries x "
                f"{attention_mask.kv_length} keys, the attention got {q_len} x {k_len}"
            )
        return attention_mask.spec(causal)
    if attention_mask is None:
        return MaskSpec(causal=True) if causal and q_len > 1 else None
    if isinstance(attention_mask, Tensor) and attention_mask.dim() == 4:
        if attention_mask.dtype == torch.bool:
            return MaskSpec(attn_mask=~attention_mask)
        return MaskSpec(attn_mask=attention_mask)
    raise ValueError(
        "attention_mask must be headlab's LazyMask, a 4-D tensor or None, got "
        f"{type(attention_mask).__name__}"
        + (f" of shape {tuple(attention_mask.shape)}" if isinstance(attention_mask, Tensor) else "")
    )

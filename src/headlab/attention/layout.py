"""Input checks and layouts of MultiHeadAttention: torch's (pos, batch, d_model), batch first,
unbatched.

Everything inside the module runs batch first with the batch dimension present; these helpers
check what comes in and convert at the edges.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

_F = TypeVar("_F", bound=Callable)


def shape_check(fn: _F) -> _F:
    """Decorate a function whose branches only validate sizes. torch.jit.trace (and so the legacy
    ONNX export) records sizes as tensors and warns (TracerWarning) at every comparison; these
    comparisons hold for the example input and decide no computation, so they are silenced."""

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        if not torch.jit.is_tracing():
            return fn(*args, **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            return fn(*args, **kwargs)

    return checked  # type: ignore[return-value]


@shape_check
def check_inputs(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    widths: tuple[int, int, int],
    dtype: torch.dtype,
    batch_first: bool,
) -> bool:
    """Validate shapes and dtypes against ``widths`` = (embed_dim, kdim, vdim); return whether
    the input is batched (3 dims) rather than unbatched (2 dims). Raises ValueError."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if query.dim() not in (2, 3):
        raise ValueError(
            "query must have 3 dims (batched) or 2 dims (unbatched), "
            f"got shape {tuple(query.shape)}"
        )
    batched = query.dim() == 3
    for name, t in (("key", key), ("value", value)):
        if t.dim() != query.dim():
            raise ValueError(
                f"{name} must have {query.dim()} dims like query, got shape {tuple(t.shape)}"
            )
    for name, t, width in zip(("query", "key", "value"), (query, key, value), widths, strict=True):
        if t.shape[-1] != width:
            raise ValueError(f"{name} last dim must be {width}, got shape {tuple(t.shape)}")
        if t.dtype != dtype:
            raise ValueError(f"{name} dtype must be {dtype}, got {t.dtype}")
    if key.shape[:-1] != value.shape[:-1]:
        raise ValueError(
            f"key and value must agree in all but the last dim, got key {tuple(key.shape)} "
            f"and value {tuple(value.shape)}"
        )
    b = 0 if batch_first else 1
    if batched and key.shape[b] != query.shape[b]:
        raise ValueError(f"key batch size must be {query.shape[b]} like query, got {key.shape[b]}")
    return batched


def to_batch_first(x: Tensor, *, batched: bool, batch_first: bool) -> Tensor:
    """(pos, batch, d_model), (batch, pos, d_model) or (pos, d_model) -> (batch, pos, d_model)."""
    if not batched:
        return x.unsqueeze(0)
    return x if batch_first else x.transpose(0, 1)


def inputs_batch_first(
    query: Tensor, key: Tensor, value: Tensor, *, batched: bool, batch_first: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """``to_batch_first`` of each input, keeping aliasing visible (key is query, value is key)
    so that self-attention can use one packed projection."""
    xq = to_batch_first(query, batched=batched, batch_first=batch_first)
    xk = xq if key is query else to_batch_first(key, batched=batched, batch_first=batch_first)
    xv = xk if value is key else to_batch_first(value, batched=batched, batch_first=batch_first)
    return xq, xk, xv


def from_batch_first(x: Tensor, *, batched: bool, batch_first: bool) -> Tensor:
    """(batch, pos, d_model) -> the caller's layout (the inverse of ``to_batch_first``)."""
    if not batched:
        return x.squeeze(0)
    return x if batch_first else x.transpose(0, 1)


@shape_check
def head_scale(head_mask: Tensor | None, batch: int, num_heads: int) -> Tensor | None:
    """head_mask (head,) or (batch, head) -> (batch|1, head, 1, 1); None stays None."""
    if head_mask is None:
        return None
    if head_mask.shape == (num_heads,):
        return head_mask.view(1, num_heads, 1, 1)
    if head_mask.shape == (batch, num_heads):
        return head_mask.view(batch, num_heads, 1, 1)
    raise ValueError(
        f"head_mask must have shape (num_heads,)=({num_heads},) or "
        f"(batch, num_heads)=({batch}, {num_heads}), got {tuple(head_mask.shape)}"
    )


def static_graph() -> bool:
    """True while torch.jit.trace, torch.onnx.export, torch.export or torch.compile records the
    call: no branch may then depend on tensor values (it would be frozen or break the graph)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling()

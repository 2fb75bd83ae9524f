"""Norms held at one run's scales, so that the maps they sit in become affine.

A norm computes n(x) = g * C(x) / s(x) + b over its last dimension, with C the centring
(LayerNorm) or the identity (RMSNorm, Gemma's 1 + weight alike) and s(x) one number per row
(per position, and per head for a per-head QK-norm). Held at the s of a given run, n is affine
in x, and so is every map made of norms, projections, biases, reshapes and rotary positions:
the family's own path from the residual stream to the kernel's q and k.

``frozen_norms(modules, batch)`` hooks the modules so that, in a forward of several copies of
the batch stacked on the batch axis whose *last* copy is the real input, every copy is
normalised with the last copy's scales (read from the module's own output on the last copy, so
that epsilon and the family's form need no knowing): the last copy is unchanged, and the other
copies see the affine map. ``norms_of(module)`` lists the norms of a module (its 1-D weight
children with "Norm" in their class name).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
from torch import Tensor, nn

from headlab.models.hf.layer import norm_scale


def norms_of(module: nn.Module) -> list[nn.Module]:
    """The norm modules inside ``module`` (itself included): a 1-D ``weight`` and "Norm" in the
    class name."""
    return [
        m
        for m in module.modules()
        if "norm" in type(m).__name__.lower()
        and isinstance(getattr(m, "weight", None), Tensor)
        and m.weight.dim() == 1
    ]


def norms_outside(parts) -> list[nn.Module]:
    """The norms of a block's modules (the transformers route's ``HFBlockParts``) outside its
    MLP."""
    inside = {
        id(m) for mlp in (parts.mlp_in, parts.mlp_out) if mlp is not None for m in norms_of(mlp)
    }
    return [m for m in norms_of(parts.module) if id(m) not in inside]


def _centred(x: Tensor) -> Tensor:
    return x - x.mean(-1, keepdim=True)


def norm_form(module: nn.Module) -> tuple[Tensor, Tensor]:
    """The norm's scale g and shift b (width,), read from its own output."""
    weight = module.weight
    width = weight.shape[0]
    with torch.no_grad():
        shift = module(torch.zeros(1, 1, width, dtype=weight.dtype, device=weight.device))
    return norm_scale(module, width), shift[0, 0]


def held_scale(x: Tensor, y: Tensor, form: tuple[Tensor, Tensor]) -> tuple[bool, Tensor]:
    """(centred, 1/s) of a norm of ``form`` (g, b) that gave ``y`` for ``x``: whether it
    subtracts the mean, and (..., 1) one over each row's scale, read from its output. ValueError
    where its output is no such map of its input."""
    g, b = form[0].to(x), form[1].to(x)
    best = None
    for centre in (False, True):
        c0 = (_centred(x) if centre else x) * g
        inv_s = ((y - b) * c0).sum(-1, keepdim=True) / c0.pow(2).sum(-1, keepdim=True).clamp_min(
            torch.finfo(x.dtype).tiny
        )
        gap = float((c0 * inv_s + b - y).abs().max())
        if best is None or gap < best[0]:
            best = (gap, centre, inv_s)
    gap, centre, inv_s = best
    if gap > 1e-4 * max(float(y.abs().max()), 1e-12):
        raise ValueError(
            f"a norm's output is not g * x / s + b with one s per row (off by {gap:.3g}): its "
            "scale cannot be held"
        )
    return centre, inv_s


def _held(x: Tensor, y: Tensor, batch: int, form: tuple[Tensor, Tensor]) -> Tensor:
    """``y`` = module(x) for copies of the batch (the last is the real input) with every copy
    normalised at the last copy's scales; ``form``: the module's (g, b)."""
    centre, inv_s = held_scale(x[-batch:], y[-batch:], form)
    copies = x.shape[0] // batch
    scales = inv_s.repeat(copies, *([1] * (inv_s.dim() - 1)))
    return (_centred(x) if centre else x) * form[0].to(x) * scales + form[1].to(x)


@contextmanager
def frozen_norms(modules: Sequence[nn.Module], batch: int) -> Iterator[None]:
    """Within the block, each of ``modules`` normalises every copy at the last copy's scales
    (see the module docstring); ``batch``: the rows of one copy on the batch axis."""

    forms = {id(m): norm_form(m) for m in modules}

    def hook(module, args, kwargs, output):
        x = args[0] if args else next(iter(kwargs.values()))
        y = output if isinstance(output, Tensor) else output[0]
        held = _held(x, y, batch, forms[id(module)]).to(y.dtype)
        return held if isinstance(output, Tensor) else (held, *output[1:])

    with ExitStack() as stack:
        for module in modules:
            handle = module.register_forward_hook(hook, with_kwargs=True)
            stack.callback(handle.remove)
        yield


__all__ = ["frozen_norms", "held_scale", "norm_form", "norms_of", "norms_outside"]

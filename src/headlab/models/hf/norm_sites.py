"""The norms of a transformers block as the run protocol's ``BlockNorm``: each with a "scale" site.

A norm computes n(x) = g * C(x) / s(x) + b over its last axis, with C the centring (LayerNorm)
or the identity (RMSNorm, Gemma's 1 + weight alike) and s(x) one number per row (per position,
and per head for a per-head QK-norm). ``HFNorm`` reads g and b from the module's own output
(``form``), whether it centres from one call on an input of non-zero mean (checked: a module
that is no such map is refused in one line), and 1/s of each row from its output on that row
(``held``), so that neither the family's epsilon nor its form (float32 inside, 1 + weight) needs
knowing. The site ``scale`` (``NORM_SITES``) carries 1/s (..., 1); a hook that replaces it makes
the module return g * C(x) * scale + b: held at given scales, the norm is affine in x.

The transformers families declare no norms, so a block's norms are its modules with a 1-D
``weight`` and "Norm" in their class name (LayerNorm, LlamaRMSNorm, T5LayerNorm...), outside its
MLP; the one in front of the attention and those inside it are named by role (``NORM_ROLES``).
A norm module's hook is put on once; it applies the sites of the block now running it (a
variant's view of a block shares the original's modules and keeps its own sites), and does
nothing while they are empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from headlab.attention.sites import NORM_SITES, Sites
from headlab.models.hf.layer import HFAttentionLayer, norm_scale

#: The attribute of a norm module whose hook is on it.
HOOKED = "headlab_norm_hooked"
#: The attribute of a norm module that holds the ``HFNorm`` of the block now running it.
RUNNING = "headlab_running_norm"


def is_norm(module: nn.Module) -> bool:
    """Whether ``module`` is a norm: a 1-D ``weight`` and "Norm" in its class name."""
    weight = getattr(module, "weight", None)
    return (
        "norm" in type(module).__name__.lower() and isinstance(weight, Tensor) and weight.dim() == 1
    )


def norms_of(module: nn.Module) -> list[nn.Module]:
    """The norm modules inside ``module`` (itself included)."""
    return [m for m in module.modules() if is_norm(m)]


def _centred(x: Tensor) -> Tensor:
    return x - x.mean(-1, keepdim=True)


def _inverse_scale(c0: Tensor, y: Tensor, shift: Tensor) -> Tensor:
    """(..., 1) the 1/s that makes c0 * (1/s) + shift closest to ``y``, row by row."""
    tiny = torch.finfo(c0.dtype).tiny
    return ((y - shift) * c0).sum(-1, keepdim=True) / c0.pow(2).sum(-1, keepdim=True).clamp_min(
        tiny
    )


@contextmanager
def _quiet(module: nn.Module) -> Iterator[None]:
    """Within the block, the module's hook applies no site (it sees no running norm)."""
    kept = module.__dict__.pop(RUNNING, None)
    try:
        with torch.no_grad():
            yield
    finally:
        if kept is not None:
            object.__setattr__(module, RUNNING, kept)


def _own_output(module: nn.Module, x: Tensor) -> Tensor:
    """The module's output on ``x`` with no site applied."""
    with _quiet(module):
        return module(x)


@dataclass(frozen=True, eq=False)
class HFNorm:
    """One norm module of a block (``BlockNorm``): its ``role``, its sites, the module."""

    role: str
    module: nn.Module
    sites: Sites = field(default_factory=lambda: Sites(NORM_SITES))

    def form(self) -> tuple[Tensor, Tensor]:
        kept = self.__dict__.get("_form")
        if kept is None:
            weight = self.module.weight
            width = weight.shape[0]
            zero = torch.zeros(1, 1, width, dtype=weight.dtype, device=weight.device)
            with _quiet(self.module):
                kept = (norm_scale(self.module, width), self.module(zero)[0, 0])
            self.__dict__["_form"] = kept
        return kept

    def centres(self) -> bool:
        """Whether the norm subtracts the row's mean, read from one call on rows of non-zero
        mean. ValueError where neither form fits its output."""
        kept = self.__dict__.get("_centres")
        if kept is None:
            g, b = self.form()
            width = g.shape[0]
            x = torch.linspace(-1.0, 3.0, width, dtype=torch.float64).roll(1)
            x = torch.stack([x, 2.5 * x.flip(0) + 0.5]).to(g)[None]  # (1, 2, width)
            y = _own_output(self.module, x)
            gaps = {}
            for centre in (False, True):
                c0 = (_centred(x) if centre else x) * g
                gaps[centre] = float((c0 * _inverse_scale(c0, y, b) + b - y).abs().max())
            kept = gaps[True] < gaps[False]
            tolerance = 1e-4 if g.dtype in (torch.float32, torch.float64) else 3e-2
            if gaps[kept] > tolerance * max(float(y.abs().max()), 1e-12):
                raise ValueError(
                    f"{type(self.module).__name__}'s output is not g * x / s + b with one s per "
                    f"row (off by {gaps[kept]:.3g}): its scale cannot be held"
                )
            self.__dict__["_centres"] = kept
        return kept

    def held(self, x: Tensor) -> tuple[bool, Tensor]:
        y = _own_output(self.module, x)
        return self.centres(), self._scale(x, y)

    def _scale(self, x: Tensor, y: Tensor) -> Tensor:
        g, b = (t.to(x) for t in self.form())
        c0 = (_centred(x) if self.centres() else x) * g
        return _inverse_scale(c0, y.to(x), b)

    def applied(self, x: Tensor, y: Tensor) -> Tensor | None:
        """The module's output ``y`` on ``x`` with the "scale" site applied, or None where no
        hook replaced it."""
        scale = self._scale(x, y)
        replaced = self.sites("scale", scale)
        if replaced is scale:
            return None
        g, b = (t.to(x) for t in self.form())
        return ((_centred(x) if self.centres() else x) * g * replaced + b).to(y.dtype)


def _norm_out(module: nn.Module, args, kwargs, output):
    norm = module.__dict__.get(RUNNING)
    if norm is None or "scale" not in norm.sites.hooks or not isinstance(output, Tensor):
        return None
    x = args[0] if args else next(iter(kwargs.values()))
    return norm.applied(x, output)


def block_norms(
    module: nn.Module,
    mlp: list[nn.Module],
    attention: HFAttentionLayer,
    cross: HFAttentionLayer | None = None,
) -> tuple[HFNorm, ...]:
    """The norms inside the block ``module`` and outside the modules ``mlp`` (its MLP's ends), by
    role: the attention's (and the cross-attention's) input norm, those inside the attention
    modules, the others "block"; each with its hook put on once."""
    inside = {id(m) for part in mlp for m in norms_of(part)}
    found = [m for m in norms_of(module) if id(m) not in inside]
    roles: dict[int, str] = {}
    for layer, prefix in ((attention, ""), (cross, "cross_")):
        if layer is None:
            continue
        for m in norms_of(layer.module):
            roles[id(m)] = prefix + "qk"
        if layer.input_norm is not None:  # one outside the block (BART's and BERT's layer 0
            # read the embeddings' norm) is not the block's: its output is the block's resid_in
            roles[id(layer.input_norm.module)] = prefix + ("in" if prefix else "attention_in")
    norms = tuple(HFNorm(roles.get(id(m), "block"), m) for m in found)
    for norm in norms:
        if not norm.module.__dict__.get(HOOKED):
            object.__setattr__(norm.module, HOOKED, True)
            norm.module.register_forward_hook(_norm_out, with_kwargs=True)
    return norms


def embedding_norm(module: nn.Module) -> HFNorm:
    """A norm between a model's embeddings and its first block (CLIP's ``pre_layrnorm``), role
    "embed", with its hook put on once; no block runs it, so it is always the running one."""
    norm = module.__dict__.get(RUNNING)
    if not isinstance(norm, HFNorm):
        norm = HFNorm("embed", module)
        running((norm,))
    if not module.__dict__.get(HOOKED):
        object.__setattr__(module, HOOKED, True)
        module.register_forward_hook(_norm_out, with_kwargs=True)
    return norm


def stack_final_norm(stack: nn.Module, blocks: list[nn.Module]) -> HFNorm | None:
    """The norm after the last block of ``stack`` (an encoder: T5's ``final_layer_norm``,
    Whisper's ``layer_norm``), role "final", hooked and running for good (it belongs to no
    block); None where the stack has none (BART's encoder: its norms outside the blocks are the
    embeddings'). The norms of ``stack`` outside ``blocks`` whose name does not say "embed";
    ValueError (one line) where more than one is left."""
    inside = {id(m) for block in blocks for m in norms_of(block)}
    found = [
        (name, m)
        for name, m in stack.named_modules()
        if is_norm(m) and id(m) not in inside and "embed" not in name.lower()
    ]
    if not found:
        return None
    if len(found) > 1:
        names = ", ".join(name for name, _ in found)
        raise ValueError(
            f"{type(stack).__name__} has {len(found)} norms after its blocks ({names})"
        )
    norm = HFNorm("final", found[0][1])
    if not norm.module.__dict__.get(HOOKED):
        object.__setattr__(norm.module, HOOKED, True)
        norm.module.register_forward_hook(_norm_out, with_kwargs=True)
    running((norm,))
    return norm


def running(norms: tuple[HFNorm, ...]) -> None:
    """Mark ``norms`` as the ones their modules' hooks apply (their block is about to run)."""
    for norm in norms:
        object.__setattr__(norm.module, RUNNING, norm)


__all__ = ["HFNorm", "block_norms", "embedding_norm", "norms_of", "running", "stack_final_norm"]

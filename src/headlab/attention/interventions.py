"""Read or replace any per-head intermediate of an attention layer during a normal forward.

Any attention layer with ``Sites`` works: headlab's ``MultiHeadAttention`` and the layers of the
models behind ``headlab.models`` (``sites``, ``num_heads``, ``num_kv_heads``); the kernel applies
the interventions in every call, whatever its path.

Sites, in the order a call reaches them (shapes as in AttentionTrace; q and k after rotary
positions, k and v with grouped K/V heads have ``kv_head`` heads):

    q             (batch, head, q_pos, d_head)
    k, v          (batch, kv_head, k_pos, d_head)
    scores        (batch, head, q_pos, k_pos)      before softmax, masks added
    weights       (batch, head, q_pos, k_pos)      after softmax (and dropout)
    head_outputs  (batch, head, q_pos, d_head)     weights @ v, after head_mask, before W_O

A model's block (``headlab.models.run_protocol``) has sites of its own, reached the same way:

    resid_in      (batch, pos, d_model)            the residual stream entering the block
    mlp_in        (batch, pos, d_model)            the MLP's input (after the family's norm)
    mlp_out       (batch, pos, d_model)            the MLP's output (after any post-norm)
    resid_out     (batch, pos, d_model)            the residual stream leaving the block

and so has each norm of a block (``Block.norms``, outside its MLP):

    scale         (..., 1)                         one over each row's scale s(x) of the norm
                                                   g * C(x) / s(x) + b, the norm's input's
                                                   leading axes (batch first); replaced, the
                                                   norm computes g * C(x) * scale + b

Everything downstream of a site sees the replaced tensor, so a replaced ``weights`` changes the
head outputs and the output, and ``need_weights=True`` returns it. While an intervention on the
scores or weights is active the kernel takes its explicit path (SDPA has no such sites), and
while any is active torch's Transformer layers do not hand the module to their fused kernel.
Interventions are context managers: the module is left as it was when the block ends, also on an
exception.

Ablation replaces head outputs before W_O, where a head's contribution is separate:
``out = sum_i head_out_i W_O[:, block i]^T + b_O``. Zeroing a slice of the output after W_O (what
some tools do) is not ablating a head: every output column mixes every head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch
from torch import Tensor

from headlab.attention.sites import BLOCK_SITES, SITES, Sites

AblationMode = Literal["zero", "mean", "resample"]


class SitedLayer(Protocol):
    """What an intervention needs of an attention layer: its sites and head counts (the part
    of ``headlab.models.interface.AttentionLayer`` that attention/ itself knows)."""

    sites: Sites
    num_heads: int
    num_kv_heads: int


class Sited(Protocol):
    """Anything with ``sites``: an attention layer (``SITES``) or a model's block
    (``BLOCK_SITES``: the residual stream in and out, the MLP's input and output)."""

    sites: Sites


def _check_site(site: str, names: Sequence[str] = SITES) -> None:
    if site not in names:
        raise ValueError(f"site must be one of {', '.join(names)}, got {site!r}")


@contextmanager
def intervene(
    module: Sited, site: str, fn: Callable[[Tensor], Tensor | None], first: bool = False
) -> Iterator[None]:
    """Within the block, every call of ``module`` (an attention layer, or a model's block:
    ``BLOCK_SITES``) passes ``site``'s tensor to ``fn``; a tensor ``fn`` returns (same shape)
    replaces it, None leaves it. ``first``: before the interventions already at the site (a
    run's given residual stream, ``headlab.models.run_protocol``). Raises ValueError for a site
    the module does not have."""
    _check_site(site, module.sites.names)
    module.sites.add(site, fn, first)
    try:
        yield
    finally:
        module.sites.remove(site, fn)


@dataclass
class Recording:
    """Tensors seen at each site, one per call, detached: ``calls[site][i]`` is call i's."""

    calls: dict[str, list[Tensor]] = field(default_factory=dict)

    def __getitem__(self, site: str) -> Tensor:
        """The last call's tensor at ``site``. Raises KeyError when nothing was recorded there."""
        if not self.calls.get(site):
            raise KeyError(f"nothing recorded at {site!r}; recorded: {sorted(self.calls)}")
        return self.calls[site][-1]


@contextmanager
def record(module: Sited, sites: Sequence[str] | None = None) -> Iterator[Recording]:
    """Record (detached copies of) ``sites`` (default: all of the module's) in every call of
    ``module`` within the block."""
    sites = module.sites.names if sites is None else sites
    recording = Recording({site: [] for site in sites})
    with _stack(module, [(s, lambda t, s=s: recording.calls[s].append(t.detach())) for s in sites]):
        yield recording


@contextmanager
def _stack(module: Sited, hooks: list[tuple[str, Callable]]) -> Iterator[None]:
    if not hooks:
        yield
        return
    (site, fn), rest = hooks[0], hooks[1:]
    with intervene(module, site, fn), _stack(module, rest):
        yield


def head_axis_index(module: SitedLayer, site: str, heads: Sequence[int]) -> list[int]:
    """``heads`` checked against the head axis of ``site`` (K/V heads for k and v)."""
    _check_site(site)
    count = module.num_kv_heads if site in ("k", "v") else module.num_heads
    for h in heads:
        if not 0 <= h < count:
            raise ValueError(f"head {h} out of range for {site!r}, which has {count} heads")
    return list(heads)


@contextmanager
def patch(module: SitedLayer, site: str, heads: Sequence[int], source: Tensor) -> Iterator[None]:
    """Activation patching: ``heads`` of ``site`` take their values from ``source`` (the same
    site recorded on another input, same shape), the other heads keep theirs."""
    index = head_axis_index(module, site, heads)

    def replace(t: Tensor) -> Tensor:
        if source.shape != t.shape:
            raise ValueError(
                f"source for {site!r} must have the shape of the site, {tuple(t.shape)}, "
                f"got {tuple(source.shape)}"
            )
        out = t.clone()
        out[:, index] = source[:, index].to(t.dtype)
        return out

    with intervene(module, site, replace):
        yield


def query_heads(
    module: SitedLayer, heads: Sequence[int] = (), kv_groups: Sequence[int] = ()
) -> list[int]:
    """Query heads named directly and through their K/V group (group g = the query heads that
    read K/V head g), sorted and unique. Raises ValueError for an index out of range."""
    group = module.num_heads // module.num_kv_heads
    for g in kv_groups:
        if not 0 <= g < module.num_kv_heads:
            raise ValueError(f"K/V group {g} out of range: the module has {module.num_kv_heads}")
    chosen = set(head_axis_index(module, "q", heads))
    chosen.update(h for g in kv_groups for h in range(g * group, (g + 1) * group))
    return sorted(chosen)


def mean_head_output(head_outputs: Tensor, positions: Tensor | None = None) -> Tensor:
    """(batch, head, q_pos, d_head) -> (head, d_head): the mean over the batch and the positions,
    only over ``positions`` (batch, q_pos) bool, True on real tokens, when given."""
    if positions is None:
        return head_outputs.mean(dim=(0, 2))
    w = positions.to(head_outputs.dtype)[:, None, :, None]  # (batch, 1, q_pos, 1)
    return (head_outputs * w).sum(dim=(0, 2)) / w.sum(dim=(0, 2))


@contextmanager
def ablate(
    module: SitedLayer,
    heads: Sequence[int] = (),
    *,
    kv_groups: Sequence[int] = (),
    mode: AblationMode = "zero",
    reference: Tensor | None = None,
) -> Iterator[None]:
    """Ablate query ``heads`` (and every query head of ``kv_groups``) at their output, before W_O.

    mode "zero": the output is 0 (the same as head_mask 0). "mean": it is the head's mean output
    on a reference batch, ``reference`` = that batch's head outputs (batch', head, q_pos',
    d_head) or their ``mean_head_output`` (head, d_head), at every position. "resample": it is
    the head's output on another input, ``reference`` = head outputs of the call's shape (from
    ``record`` on the other input), or None: the previous example of the same batch (rolled by
    one).
    Raises ValueError for a mode without its reference or a head out of range.
    """
    index = query_heads(module, heads, kv_groups)
    if mode not in ("zero", "mean", "resample"):
        raise ValueError(f"mode must be zero, mean or resample, got {mode!r}")
    if mode == "mean":
        if reference is None:
            raise ValueError("mode 'mean' needs reference head outputs (a reference batch)")
        mean = reference if reference.dim() == 2 else mean_head_output(reference)

    def replace(t: Tensor) -> Tensor:  # (batch, head, q_pos, d_head)
        out = t.clone()
        if mode == "zero":
            out[:, index] = 0.0
        elif mode == "mean":
            out[:, index] = mean[index].to(t.dtype)[None, :, None, :]
        else:  # resample within the batch: example b takes example b - 1's output
            out[:, index] = torch.roll(t[:, index], shifts=1, dims=0)
        return out

    if mode == "resample" and reference is not None:
        with patch(module, "head_outputs", index, reference):
            yield
        return
    with intervene(module, "head_outputs", replace):
        yield


__all__ = [
    "BLOCK_SITES",
    "SITES",
    "Recording",
    "Sited",
    "SitedLayer",
    "ablate",
    "head_axis_index",
    "intervene",
    "mean_head_output",
    "patch",
    "query_heads",
    "record",
]

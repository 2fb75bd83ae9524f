"""Norms held at one run's scales, so that the maps they sit in become affine.

A norm computes n(x) = g * C(x) / s(x) + b over its last dimension, with C the centring
(LayerNorm) or the identity (RMSNorm, Gemma's 1 + weight alike) and s(x) one number per row
(per position, and per head for a per-head QK-norm). Held at the s of a given run, n is affine
in x, and so is every map made of norms, projections, biases, reshapes and rotary positions:
the family's own path from the residual stream to the kernel's q and k.

The model names its blocks' norms (the run protocol's ``Block.norms``, each a ``BlockNorm``
with the site "scale": 1/s (..., 1)). ``frozen_norms(norms, batch)`` replaces that site so that,
in a forward of several copies of the batch stacked on the batch axis whose *last* copy is the
real input, every copy is normalised with the last copy's scales: the last copy is unchanged,
and the other copies see the affine map. ``qk_norms(block)`` are the norms on the way
from the stream to a block's q and k.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.models.run_protocol import Block, BlockNorm


def qk_norms(block: Block) -> list[BlockNorm]:
    """The norms on the way from the stream to ``block``'s q and k: the one in front of its
    attention and any QK-norm inside it."""
    return [n for n in block.norms if n.role in ("attention_in", "qk")]


def last_copy_scales(batch: int):
    """A "scale" intervention: every copy of the batch (``batch`` rows each, on axis 0) takes
    the last copy's 1/s."""

    def hold(inv_s: Tensor) -> Tensor:  # (copies * batch, ..., 1)
        copies = inv_s.shape[0] // batch
        return inv_s[-batch:].repeat(copies, *([1] * (inv_s.dim() - 1)))

    return hold


@contextmanager
def frozen_norms(norms: Sequence[BlockNorm], batch: int) -> Iterator[None]:
    """Within the block, each of ``norms`` normalises every copy at the last copy's scales
    (see the module docstring); ``batch``: the rows of one copy on the batch axis."""
    hold = last_copy_scales(batch)
    with ExitStack() as stack:
        for norm in norms:
            stack.enter_context(intervene(norm, "scale", hold))
        yield


__all__ = ["frozen_norms", "last_copy_scales", "qk_norms"]

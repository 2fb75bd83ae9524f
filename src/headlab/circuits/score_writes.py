"""Writes into the residual stream carried through blocks with their norms held: what the score
split (score_sides.py) reads where a head's write is not its output through W_O alone.

With every norm of a block held at one run's scales (frozen_norms.py), the block is affine in
its stream and in its heads' and MLP's outputs. Where the block adds to its stream (pre-norm,
with or without post-norms on its branches: Gemma 2, OLMo 2), a write that entered it leaves it
unchanged; in a post-norm block (BERT, MiniLM: ``x' = LN2(LN1(x + attn) + mlp)``), every write
that entered it, and each of its own writes, leaves it as ``g * C(write) / s``, pushed through
each of its norms, with the norms' shifts and the output biases as constants. Either way the
writes leaving a block sum, with one constant, to its output stream.

``block_writes`` runs one block on copies of some positions (``Runner.forward`` with ``rows``):
one copy per carried write as its stream, with no head and no MLP output; one per new head part
(by default head h's own output alone, then, in a decoder block of an encoder-decoder, each
cross-attention head's) and one for the MLP's output alone, on a zero stream; a zero copy; and
the real run last, whose scales every norm holds. Each output minus the zero copy's is that
write as it leaves the block.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.frozen_norms import frozen_norms
from headlab.circuits.resume import Cache, Runner
from headlab.models.run_protocol import StopAt


def block_writes(
    runner: Runner,
    cache: Cache,
    block,
    rows: slice,
    carried: Tensor,
    head_parts: Tensor | None = None,
    with_mlp: bool = True,
) -> Tensor:
    """(carried + part [+ cross head] [+ mlp], batch, rows, d_model): the writes ``carried``
    (carried, batch, rows, d_model), entering ``block`` at the positions ``rows``, as they leave
    it, then each new head part's write, each cross-attention head's (a decoder block of an
    encoder-decoder, with the default parts) and the MLP's (``with_mlp`` and the block has one).
    ``head_parts`` (part, batch, head, rows, d_head): the heads' outputs (before W_O) of each
    new write; default one part per head, its own output in the run ``cache``."""
    i = block.index
    heads = cache.head_outputs[i][:, :, rows]  # (batch, head, rows, d_head)
    cross = None if block.cross_attention is None else cache.cross[i][:, :, rows]
    crossed = cross is not None and head_parts is None
    if head_parts is None:
        head_parts = one_head_each(heads)
    b, n, count = heads.shape[0], carried.shape[0], head_parts.shape[0]
    cross_count = cross.shape[1] if crossed else 0
    mlp = with_mlp and block.has_mlp
    parts = n + count + cross_count + mlp
    copies = parts + 2
    outputs = heads.new_zeros(copies, *heads.shape)
    outputs[n : n + count] = head_parts
    outputs[-1] = heads

    def keep_heads(_t: Tensor) -> Tensor:
        return outputs.flatten(0, 1)

    def keep_cross(_t: Tensor) -> Tensor:  # only the real run and each cross head's own copy
        out = cross.new_zeros(copies, *cross.shape)
        out[-1] = cross
        if crossed:
            out[n + count : n + count + cross_count] = one_head_each(cross)
        return out.flatten(0, 1)

    def keep_mlp(_t: Tensor) -> Tensor:
        value = cache.mlp[i][:, rows]
        out = value.new_zeros(copies, *value.shape)
        out[-1] = value
        if mlp:
            out[n + count + cross_count] = value
        return out.flatten(0, 1)

    def hooks(stack: ExitStack) -> None:
        stack.enter_context(frozen_norms(block.norms, b))
        stack.enter_context(intervene(block.attention, "head_outputs", keep_heads))
        if cross is not None:
            stack.enter_context(intervene(block.cross_attention, "head_outputs", keep_cross))
        if block.has_mlp:
            stack.enter_context(intervene(block, "mlp_out", keep_mlp))

    stream = cache.resid[i][:, rows]
    zeros = stream.new_zeros(copies - n - 1, *stream.shape)
    hidden = torch.cat([carried.to(stream), zeros, stream[None]])
    with torch.no_grad():
        out = runner.forward(i, hidden.flatten(0, 1), copies, hooks, rows, StopAt(i, "resid_out"))
    out = out.unflatten(0, (copies, b))
    return out[:parts] - out[parts]


def one_head_each(heads: Tensor) -> Tensor:
    """(head, batch, head, rows, d_head): part h holds head h's output alone."""
    parts = heads.new_zeros(heads.shape[1], *heads.shape)
    for h in range(heads.shape[1]):
        parts[h, :, h] = heads[:, h]
    return parts


def carried_to(
    runner: Runner, cache: Cache, start: int, layer: int, rows: slice, carried: Tensor
) -> Tensor:
    """(carried, batch, rows, d_model) the writes ``carried`` entering block ``start`` as they
    enter block ``layer`` (through blocks start .. layer - 1, norms held)."""
    n = carried.shape[0]
    for block in runner.blocks[start:layer]:
        none = cache.head_outputs[block.index][None, :, :, rows][:0]  # no new head part
        carried = block_writes(runner, cache, block, rows, carried, none, False)[:n]
    return carried


__all__ = ["block_writes", "carried_to", "one_head_each"]

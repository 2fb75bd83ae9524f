"""Chosen positions of a causal text run through the blocks with a whole run's keys and values
as their context: the stream, head outputs and MLP outputs at those positions, exactly as the
whole run has them, without holding any of them over every position.

``key_values(model, batch)`` is one run that keeps only each block's attention keys and values,
as the kernel's k and v sites receive them (after rotary): 2 x blocks x (batch, kv_head, pos,
d_head) floats (94 MB for SmolLM2 at 8192 tokens in float32). ``context_cache(model, batch,
positions, context)`` then runs only ``positions`` (ascending) through the blocks
(``run_blocks`` with those rows at their own positions), and at every block replaces the head
outputs with the heads' attention of the rows' own queries over the context's keys at positions
up to theirs (``context_attention``). Each position's stream then equals the whole run's: a
block is a map of each position's stream and of the keys and values before it, which the
context holds.

For the family's plain causal attention only (the module's ``scaling``, a full causal mask): a
layer with a soft-cap, a sliding window (a module attribute, or the config's: Mistral keeps it
there, plain_attention.py) or sinks is refused in one line.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.models.hf.plain_attention import slides
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import RunCache, RunnableModel, StopAt


@dataclass
class KeyValues:
    """Each block's keys ``k`` and values ``v`` (batch, kv_head, pos, d_head) over one whole run,
    and the run's padding ``mask`` (batch, pos) bool (True: a real token)."""

    k: list[Tensor]
    v: list[Tensor]
    mask: Tensor


def plain_scales(model: RunnableModel) -> list[float]:
    """Each block's score scale; ValueError where a layer's attention is more than a scaled,
    causal softmax (soft-cap, sliding window, sinks) or the model is not causal."""
    if not getattr(model, "causal", False):
        raise ValueError(f"a context run reads a causal model's keys; {model.name} is not causal")
    scales = []
    config = getattr(model, "config", None)
    for block in model.blocks():
        module = block.attention.module
        for name in ("attn_logit_softcapping", "sliding_window", "sinks"):
            if name == "sliding_window":  # Mistral's is in its config only
                found = slides(config, module, block.index)
            else:
                found = getattr(module, name, None) is not None
            if found:
                raise ValueError(
                    f"a context run computes plain causal attention; block {block.index} of "
                    f"{model.name} has {name}"
                )
        scale = getattr(module, "scaling", None)
        scales.append(block.attention.head_dim**-0.5 if scale is None else float(scale))
    return scales


def key_values(model: RunnableModel, batch: TokenBatch) -> KeyValues:
    """One run of ``batch`` keeping each block's keys and values only (module docstring)."""
    blocks = model.blocks()
    k: list = [None] * len(blocks)
    v: list = [None] * len(blocks)

    def into(store: list, index: int):
        return lambda t: store.__setitem__(index, t.detach())

    def keeping(stack: ExitStack) -> None:
        for block in blocks:
            stack.enter_context(intervene(block.attention, "k", into(k, block.index)))
            stack.enter_context(intervene(block.attention, "v", into(v, block.index)))

    last = torch.tensor([batch.input_ids.shape[1] - 1])
    with torch.no_grad():
        model.run_blocks(batch, keep=last, interventions=keeping)
    return KeyValues(k, v, batch.attention_mask.bool())


def context_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float) -> Tensor:
    """(batch, head, rows, d_head) softmax(scale q k^T) v over the keys each row may see.
    q: (batch, head, rows, d_head); k, v: (batch, kv_head, pos, d_head); allowed: (batch, rows,
    pos) bool."""
    group = q.shape[1] // k.shape[1]
    kv = k.shape[1]
    by_group = q.unflatten(1, (kv, group))  # (batch, kv_head, group, rows, d_head)
    scores = scale * by_group @ k[:, :, None].transpose(-2, -1)  # (batch, kv, group, rows, pos)
    scores = scores.masked_fill(~allowed[:, None, None], float("-inf"))
    out = torch.softmax(scores, -1) @ v[:, :, None]  # (batch, kv_head, group, rows, d_head)
    return out.flatten(1, 2)


def context_cache(
    model: RunnableModel,
    batch: TokenBatch,
    positions: Tensor,
    context: KeyValues,
    until: int | None = None,
) -> RunCache:
    """The run at ``positions`` (n,) int64, ascending, alone, each block's heads attending the
    context's keys at positions up to their own: a ``RunCache`` over those n positions (resid,
    head_outputs, mlp; final: the final states at them), equal to the whole run's there.
    ``until``: the run stops at that block's resid_in (kept; later entries None, final the
    stream there)."""
    if positions.dim() != 1 or positions.numel() == 0:
        raise ValueError(f"positions are one non-empty row, got shape {tuple(positions.shape)}")
    if bool((positions[1:] <= positions[:-1]).any()):
        raise ValueError("positions must be ascending and distinct")
    scales = plain_scales(model)
    blocks = model.blocks()
    n = len(blocks)
    length = context.k[0].shape[2]
    allowed = torch.arange(length)[None] <= positions[:, None]  # (rows, pos)
    allowed = allowed[None] & context.mask[:, None]  # (batch, rows, pos)
    resid: list = [None] * (n + 1)
    heads: list = [None] * n
    mlp: list = [None] * n
    seen: dict[int, Tensor] = {}

    def into(store: list, index: int):
        return lambda t: store.__setitem__(index, t.detach())

    def attend_context(index: int):
        def replace(_t: Tensor) -> Tensor:
            out = context_attention(
                seen[index], context.k[index], context.v[index], allowed, scales[index]
            )
            heads[index] = out
            return out

        return replace

    def keeping(stack: ExitStack) -> None:
        for block in blocks:
            i = block.index
            stack.enter_context(intervene(block, "resid_in", into(resid, i)))
            stack.enter_context(intervene(block.attention, "q", into_dict(seen, i)))
            stack.enter_context(intervene(block.attention, "head_outputs", attend_context(i)))
            if block.has_mlp:
                stack.enter_context(intervene(block, "mlp_out", into(mlp, i)))
        stack.enter_context(intervene(blocks[-1], "resid_out", into(resid, n)))

    stop = None if until is None or until >= n else StopAt(until, "resid_in")
    with torch.no_grad():
        final = model.run_blocks(batch, rows=positions, interventions=keeping, stop=stop)
    return RunCache(resid, heads, mlp, final, {})


def into_dict(store: dict, key: int):
    return lambda t: store.__setitem__(key, t.detach())


__all__ = ["KeyValues", "context_attention", "context_cache", "key_values", "plain_scales"]

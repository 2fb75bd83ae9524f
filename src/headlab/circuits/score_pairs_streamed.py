"""One head's pair matrix summed over every query of a long text at the key it attends, in
memory that does not grow with the square of the length or with components x positions.

What it sums: for head h of layer L and each query i, the key j*(i) it attends (its highest
causal score) and the pair matrix of that score (score_sides.py: the terms scale q_i^a . k_j^b
over query-side components a and key-side components b, norms held at the run's scales, the
constant "qk-bias" on each side); the result is the sum over i of those matrices, (component +
1, component + 1), whose total is the sum over queries of their raw scores scale q_i . k_j*.

How: one run keeps only every block's keys and values (models/hf/context_run.py:
``key_values``). Then a block of ``BLOCK`` query positions runs through the blocks up to L with
that context (``context_cache``), which gives their stream, head outputs and MLP outputs, so
their writes (score_sides.formula_writes) and norm scales; their attended keys come from their
queries and the context's keys; the keys not among the block's queries run the same way. The
q and k terms of each write follow from layer L's held map (qk_maps.py), and the block's
matrices are added up. Held at once: the keys and values, one block's writes (component, rows,
embed_dim), never a (pos, pos) matrix or a component over every position. For the families of
qk_maps (a norm in front, no QK-norm, rotate-half rotary or none) with plain causal attention
(context_run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.circuits.blocks import circuit_blocks
from headlab.circuits.graph import EMBED, head_name, mlp_name
from headlab.circuits.qk_maps import QKMap, qk_map, turn
from headlab.circuits.score_sides import LINEAR_TOLERANCE, OUT_BIAS, QK_BIAS, formula_writes
from headlab.models.hf.context_run import KeyValues, context_cache, key_values, plain_scales
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import RunCache

#: Query positions run through the blocks together.
BLOCK = 64


@dataclass
class PairsOverQueries:
    """``matrix`` (component + 1, component + 1): the sum over queries of the pair matrix at
    the key each attends (module docstring), rows the query side and columns the key side, over
    ``components`` (the layer's writers, then ``QK_BIAS``); ``key`` (pos,) each query's attended
    key; ``raw`` (pos,) each query's raw score there (scale q . k); ``scale`` the kernel's."""

    layer: int
    head: int
    components: list[str]
    matrix: Tensor
    key: Tensor
    raw: Tensor
    scale: float


def components(model, layer: int) -> list[str]:
    """The writers of the stream entering ``layer`` (as ``Sides.components``), then
    ``QK_BIAS``."""
    names = [EMBED]
    for block in circuit_blocks(model)[:layer]:
        names += [head_name(block.index, h) for h in range(block.attention.num_heads)]
        names += [mlp_name(block.index)] if block.has_mlp else []
    return [*names, OUT_BIAS, QK_BIAS]


def _writes(model, run: RunCache, layer: int) -> Tensor:
    """(component, rows, embed_dim) the writes at the run's positions (batch 1), the last the
    rest (output biases); ValueError where the stream is not their sum."""
    found = [run.resid[0][0]]
    biases = 0
    for block in circuit_blocks(model)[:layer]:
        mlp = run.mlp[block.index]
        writes, bias = formula_writes(block, run.head_outputs[block.index], mlp)
        found += list(writes[:, 0])
        biases = biases + bias
    stream = run.resid[layer][0]
    rest = stream - torch.stack(found).sum(0)
    if float((rest - biases).abs().max()) > LINEAR_TOLERANCE * max(
        float(stream.abs().max()), 1e-12
    ):
        raise ValueError(f"layer {layer}: the pair matrix at length needs writes by the formula")
    return torch.stack([*found, rest])


def _terms(held: QKMap, run: RunCache, layer: int, writes: Tensor, positions: Tensor, side):
    """(component + 1, rows, d_head) the q (``side`` "q": head index) or k ("k": K/V group)
    terms at ``positions`` (rows,) of their writes (component, rows, embed_dim), the constant
    last."""
    kind, index = side
    weight = (held.w_q if kind == "q" else held.w_k)[index]  # (d_head, embed_dim)
    constant = (held.c_q if kind == "q" else held.c_k)[index]
    centred, inv_s = held.held(run.resid[layer][0])
    terms = held.linear(writes, centred, inv_s) @ weight.t()  # (component, rows, d_head)
    terms = torch.cat([terms, constant.expand(1, terms.shape[1], -1)])
    tables = held.tables(positions)
    return turn(terms, torch.arange(positions.shape[0]), tables)


def pairs_over_queries(
    model,
    ids: Tensor,
    layer: int,
    head: int,
    progress: Callable[[int, int], None] | None = None,
) -> PairsOverQueries:
    """The pair matrix of ``head`` of ``layer`` summed over every query of ``ids`` (1, pos)
    at its attended key (module docstring)."""
    if ids.shape[0] != 1:
        raise ValueError(f"the pair matrix at length reads one text, got a batch of {ids.shape[0]}")
    blocks = circuit_blocks(model)
    attention = blocks[layer].attention
    if not 0 <= head < attention.num_heads:
        raise ValueError(f"head must be in 0..{attention.num_heads - 1}, got {head}")
    batch = TokenBatch(ids, torch.ones_like(ids, dtype=torch.bool), [])
    scale = plain_scales(model)[layer]
    context: KeyValues = key_values(model, batch)
    dtype = context.k[layer].dtype
    held = qk_map(model, blocks[layer], dtype)
    group = head // held.per
    keys = context.k[layer][0, group]  # (pos, d_head), rotated: the kernel's
    length = ids.shape[1]
    names = components(model, layer)
    matrix = keys.new_zeros(len(names), len(names))
    key = torch.empty(length, dtype=torch.long)
    raw = keys.new_empty(length)
    for start in range(0, length, BLOCK):
        queries = torch.arange(start, min(start + BLOCK, length))
        run = context_cache(model, batch, queries, context, until=layer)
        writes = _writes(model, run, layer)
        q = _terms(held, run, layer, writes, queries, ("q", head))  # (comp + 1, rows, d_head)
        scores = q.sum(0) @ keys[: int(queries[-1]) + 1].t()  # (rows, k_pos)
        scores = scores.masked_fill(torch.arange(scores.shape[1]) > queries[:, None], -torch.inf)
        attended = scores.argmax(-1)
        key[queries] = attended
        wanted, where = torch.unique(attended, return_inverse=True)
        k_run = context_cache(model, batch, wanted, context, until=layer)
        k = _terms(held, k_run, layer, _writes(model, k_run, layer), wanted, ("k", group))
        k_at = k[:, where]  # (comp + 1, rows, d_head): each query's key's terms
        matrix += scale * torch.einsum("ard,brd->ab", q, k_at)
        raw[queries] = scale * (q.sum(0) * k_at.sum(0)).sum(-1)
        if progress is not None:
            progress(int(queries[-1]) + 1, length)
    return PairsOverQueries(layer, head, names, matrix, key, raw, scale)


__all__ = ["BLOCK", "PairsOverQueries", "components", "pairs_over_queries"]

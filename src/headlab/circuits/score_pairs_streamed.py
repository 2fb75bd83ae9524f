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
their writes and norm scales; their attended keys come from their
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
from headlab.circuits.score_sides import LINEAR_TOLERANCE, OUT_BIAS, QK_BIAS
from headlab.models.hf.context_run import KeyValues, context_cache, key_values, plain_scales
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import RunCache

#: Query positions run through the blocks together.
BLOCK = 128


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


@dataclass
class _Side:
    """One side of the score (``kind`` "q": query head ``index``; "k": K/V group ``index``)
    of the layer's held ``map``: ``weight`` (d_head, embed_dim) W with the norm's g folded in
    and centred for a LayerNorm (W g C: what D x meets, up to 1/s), ``constant`` (d_head,),
    and per earlier block its heads' outputs composed into it, W g C W_O (head, d_head,
    d_head)."""

    weight: Tensor
    constant: Tensor
    through_heads: list[Tensor]
    centred: bool

    @classmethod
    def of(cls, held: QKMap, blocks: list, layer: int, kind: str, index: int, centred: bool):
        weight = (held.w_q if kind == "q" else held.w_k)[index] * held.g  # (d_head, embed_dim)
        if centred:  # W g C = (W g) - its row means: C is symmetric
            weight = weight - weight.mean(-1, keepdim=True)
        constant = (held.c_q if kind == "q" else held.c_k)[index]
        through = []
        for block in blocks[:layer]:
            attention = block.attention
            w_o = attention.output_weight()
            if w_o is None:
                raise ValueError(
                    f"layer {block.index} has no output projection taking its heads' outputs "
                    "unchanged: its heads' writes are not their own"
                )
            w_o = w_o.detach().to(weight).view(w_o.shape[0], attention.num_heads, -1)
            through.append(torch.einsum("oe,ehd->hod", weight, w_o))
        return cls(weight, constant, through, centred)


def _terms(
    side: _Side, held: QKMap, blocks: list, run: RunCache, layer: int, positions: Tensor
) -> Tensor:
    """(component + 1, rows, d_head) the q or k terms of ``side`` at ``positions`` (rows,) of
    one context run: each write at those positions taken through the held map (a head's output
    through W g C W_O, never as an embed_dim write), the rest (the stream minus the writes: the
    output biases) and the constant last; rotated at the positions. ValueError where the rest
    is not the output biases."""
    stream = run.resid[layer][0]  # (rows, embed_dim)
    _, inv_s = held.held(stream)
    made = [run.resid[0][0]]  # the embed_dim writes that are not heads'
    terms = []
    written = run.resid[0][0].clone()
    biases = 0
    for block, through in zip(blocks[:layer], side.through_heads, strict=True):
        heads = run.head_outputs[block.index][0]  # (head, rows, d_head)
        w_o = block.attention.output_weight().detach().to(stream)
        written += heads.transpose(0, 1).flatten(1) @ w_o.t()
        terms.append(torch.einsum("hri,hoi->hro", heads, through))
        bias = getattr(block.attention.output.module, "bias", None)
        biases = biases + (0 if bias is None else bias.detach().to(stream))
        if block.has_mlp:
            made.append(run.mlp[block.index][0])
            written += made[-1]
            terms.append(None)
    rest = stream - written
    if float((rest - biases).abs().max()) > LINEAR_TOLERANCE * max(
        float(stream.abs().max()), 1e-12
    ):
        raise ValueError(f"layer {layer}: the pair matrix at length needs writes by the formula")
    plain = torch.stack([*made, rest]) @ side.weight.t()  # (writes, rows, d_head)
    out, n = [plain[0:1]], 1
    for term in terms:
        if term is None:
            out.append(plain[n : n + 1])
            n += 1
        else:
            out.append(term)
    out.append(plain[n:])
    constant = side.constant.expand(1, stream.shape[0], -1)
    unrotated = torch.cat([torch.cat(out) * inv_s[:, None], constant])
    return turn(unrotated, torch.arange(positions.shape[0]), held.tables(positions))


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
    sides: tuple[_Side, _Side] | None = None
    for start in range(0, length, BLOCK):
        queries = torch.arange(start, min(start + BLOCK, length))
        run = context_cache(model, batch, queries, context, until=layer)
        if sides is None:  # whether the norm centres, read from its output on the first run
            centred = held.held(run.resid[layer][0])[0]
            sides = tuple(
                _Side.of(held, blocks, layer, kind, index, centred)
                for kind, index in (("q", head), ("k", group))
            )
        query_side, key_side = sides
        q = _terms(query_side, held, blocks, run, layer, queries)  # (comp + 1, rows, d_head)
        scores = q.sum(0) @ keys[: int(queries[-1]) + 1].t()  # (rows, k_pos)
        scores = scores.masked_fill(torch.arange(scores.shape[1]) > queries[:, None], -torch.inf)
        attended = scores.argmax(-1)
        key[queries] = attended
        wanted, where = torch.unique(attended, return_inverse=True)
        k_run = context_cache(model, batch, wanted, context, until=layer)
        k = _terms(key_side, held, blocks, k_run, layer, wanted)
        k_at = k[:, where]  # (comp + 1, rows, d_head): each query's key's terms
        matrix += scale * torch.einsum("ard,brd->ab", q, k_at)
        raw[queries] = scale * (q.sum(0) * k_at.sum(0)).sum(-1)
        if progress is not None:
            progress(int(queries[-1]) + 1, length)
    return PairsOverQueries(layer, head, names, matrix, key, raw, scale)


__all__ = ["BLOCK", "PairsOverQueries", "components", "pairs_over_queries"]

"""Every head's two marginals at the key each query attends, for a whole text, without running
the q/k maps once per component (score_sides.py does that for chosen pairs).

With the norm in front held at its scale 1/s_p at each position p, a head's raw query and key
are affine: q_p = W_Q D_p x_p + c_Q, k_p = W_K D_p x_p + c_K, D_p x = g * C(x) / s_p (C: the
centring of a LayerNorm, else the identity), and rotary makes the score
scale * (R(i) q_i) . (R(j) k_j) (R(p): the family's own tables at position p, rotary_tables;
not R(i - j), which the float32 tables give only up to their rounding). So the marginal of a
component a on the query side is a dot product of its write at i with one pulled-back vector,
and likewise on the key side at j:

    query side  w_a(i) . scale D_i W_Q^T R(i)^T k_j
    key side    w_b(j) . scale D_j W_K^T R(j)^T q_i

(constants c_Q, c_K: the "qk-bias" term). Each layer keeps R(i)^T k_j and R(j)^T q_i
(head, pos, d_head), rotary applied from its (pos, d_rot) tables, never as (pos, d_head, d_head)
matrices; the pulled-back vectors are made from them a block at a time. The writes are held
position-major (pos, component, embed_dim) and read a block of positions at a time by every
layer: the query side is one batched product per block (all heads at once); the key side reads
each attended key's writes once, for every (head, query) row that attends it. ``every_layer`` fills
one buffer of writes as the layers go. For families whose map is that: a scaled norm in front,
no QK-norm, writes by the formula, rotate-half rotary or none (else ValueError, one line; the
pair split of score_split.py covers every family).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.circuits.score_sides import LINEAR_TOLERANCE, Sides

#: Query rows per block of the attended-key search (scores (head, rows, pos) at a time).
ROWS = 256
#: Positions per block of the pass over the writes ((rows, component, embed_dim) read at once,
#: by every layer in turn; fewer, larger products: each small op costs most on a busy machine).
POSITIONS = 64


def _fast_parts(sides: Sides, layer: int) -> dict:
    """What the marginals need of ``layer``: W_Q (head, d_head, embed_dim), W_K (kv_head,
    d_head, embed_dim), the norm's g, centring and 1/s per position, the projections'
    constants, the kernel's q (head, pos, d_head) and k (kv_head, pos, d_head), the rotary
    tables; ValueError where the layer's map is not the one of the module docstring."""
    block = sides.runner.blocks[layer]
    attention = block.attention
    front = [n for n in block.norms if n.role == "attention_in"]
    if len(front) != 1 or any(n.role == "qk" for n in block.norms):
        raise ValueError(
            f"layer {layer}: the at-length marginals need one norm in front and no QK-norm; "
            "split chosen pairs instead (why-attends)"
        )
    heads, groups, d = attention.num_heads, attention.num_kv_heads, attention.head_dim
    w_q, w_k = (w.detach() for w in attention.query_key_weights())
    x = sides.cache.resid[layer][0]  # (pos, embed_dim)
    length = x.shape[0]
    centred, inv_s = front[0].held(x)
    g, shift = (t.to(x) for t in front[0].form())
    centre = (x - x.mean(-1, keepdim=True) if centred else x) * g * inv_s  # the held linear part
    bias_q, bias_k = _bias(attention.query), _bias(attention.key)
    w_q, w_k = w_q.to(x), w_k.to(x)
    c_q = w_q @ shift + (0 if bias_q is None else bias_q.to(x))
    c_k = w_k @ shift + (0 if bias_k is None else bias_k.to(x))
    tables = _tables(sides, length, d, x.dtype)
    q = (centre @ w_q.t() + c_q).view(length, heads, d).transpose(0, 1)  # (head, pos, d_head)
    k = (centre @ w_k.t() + c_k).view(length, groups, d).transpose(0, 1)
    positions = torch.arange(length)
    return {
        "w_q": w_q.view(heads, d, -1),
        "w_k": w_k.view(groups, d, -1),
        "g": g,
        "inv_s": inv_s[:, 0],
        "centred": centred,
        "tables": tables,
        "q": _turn(q, positions, tables),
        "k": _turn(k, positions, tables),
        "c_q": c_q.view(heads, d),
        "c_k": c_k.view(groups, d),
    }


def _bias(projection) -> Tensor | None:
    bias = getattr(projection.module, "bias", None)
    if bias is None:
        return None
    return bias.detach()[list(projection.rows)]


def _tables(sides: Sides, length: int, head_dim: int, dtype: torch.dtype):
    """(cos, sin (pos, d_rot), H (d_rot, d_rot): x @ H = rotate_half(x)) of the family's rotary
    at positions 0 .. length - 1; None for a family without rotary."""
    tables = getattr(sides.runner.model, "rotary_tables", None)
    if tables is None:
        return None
    try:
        cos, sin, rotate_half = tables(torch.arange(length), head_dim)
    except ValueError as error:
        if "has none" not in str(error):
            raise
        return None
    d_rot = cos.shape[-1]
    if d_rot > head_dim or d_rot % 2:
        raise ValueError(f"rotary tables of width {d_rot} do not fit heads of {head_dim}")
    half = rotate_half(torch.eye(d_rot, dtype=torch.float64))  # row e: rotate_half(e)
    return cos.to(dtype), sin.to(dtype), half.to(dtype)


def _turn(x: Tensor, positions: Tensor, tables, back: bool = False) -> Tensor:
    """R(p) x (``back``: R(p)^T x) for x (..., rows, d_head) at ``positions`` (rows,):
    R(p) x = cos_p x + sin_p rotate_half(x), R(p)^T x = cos_p x + H^T (sin_p x)."""
    if tables is None:
        return x
    cos, sin, half = tables
    r = cos.shape[-1]
    c, s = cos[positions], sin[positions]  # (rows, d_rot)
    part = x[..., :r]
    turned = part * c + ((part * s) @ half.t() if back else (part @ half) * s)
    return torch.cat([turned, x[..., r:]], -1)


def _pulled(parts: dict, vectors: Tensor, positions: Tensor, weight: Tensor) -> Tensor:
    """(head, rows, embed_dim): D_p W^T v for each row's vector v (head, rows, d_head) with
    ``weight`` (head, d_head, embed_dim) at positions (head, rows)."""
    out = torch.bmm(vectors, weight) * parts["g"] * parts["inv_s"][positions][..., None]
    if parts["centred"]:
        out = out - out.mean(-1, keepdim=True)
    return out


def _keys(parts: dict, per: int) -> Tensor:
    """(head, pos) the key each head's query attends (its highest causal score)."""
    q, k = parts["q"], parts["k"]
    heads, length, _ = q.shape
    key = torch.empty(heads, length, dtype=torch.long)
    positions = torch.arange(length)
    by_group = q.view(-1, per, length, q.shape[-1])  # (kv_head, per, pos, d_head)
    for start in range(0, length, ROWS):
        i = positions[start : start + ROWS]
        scores = by_group[:, :, i] @ k[:, None].transpose(-2, -1)  # (kv_head, per, rows, pos)
        scores = scores.masked_fill(positions > i[:, None], float("-inf"))
        key[:, i] = scores.argmax(-1).flatten(0, 1)
    return key


@dataclass
class _Plan:
    """One receiver layer, ready for the pass over the writes: its parts (``_fast_parts``), the
    kernel's ``scale``, ``count`` writes read, the attended ``key`` (head, pos), ``to_q`` R(i)^T
    k_j and ``to_k`` R(j)^T q_i (head, pos, d_head), the (head, query) rows sorted by key
    (``order``, ``sorted_keys``) and the outputs (head, pos, count + 2)."""

    parts: dict
    scale: float
    count: int
    key: Tensor
    to_q: Tensor
    to_k: Tensor
    order: Tensor
    sorted_keys: Tensor
    query_side: Tensor
    key_side: Tensor


def _plan(parts: dict, scale: float, count: int, rest: Tensor) -> _Plan:
    """The plan of one layer reading its first ``count`` writes; the rest (pos, embed_dim) and
    the q/k maps' constant are filled here, the writes' columns by ``_pass``."""
    q, k = parts["q"], parts["k"]
    heads, length, _ = q.shape
    per = heads // k.shape[0]
    key = _keys(parts, per)
    group = torch.arange(heads) // per
    k_at = k[group[:, None], key]  # (head, pos, d_head): each query's attended key
    to_q = _turn(k_at, torch.arange(length), parts["tables"], back=True)  # R(i)^T k_j
    to_k = _turn(q, key, parts["tables"], back=True)  # R(j)^T q_i
    query_side = q.new_empty(heads, length, count + 2)
    key_side = q.new_empty(heads, length, count + 2)
    positions = torch.arange(length).expand(heads, length)
    pulled = scale * _pulled(parts, to_q, positions, parts["w_q"])  # (head, pos, embed_dim)
    query_side[..., count] = (pulled * rest).sum(-1)
    pulled = scale * _pulled(parts, to_k, key, parts["w_k"][group])
    key_side[..., count] = (pulled * rest[key]).sum(-1)
    del pulled
    query_side[..., count + 1] = scale * (to_q * parts["c_q"][:, None]).sum(-1)
    key_side[..., count + 1] = scale * (to_k * parts["c_k"][group][:, None]).sum(-1)
    sorted_keys, order = torch.sort(key.flatten(), stable=True)
    return _Plan(parts, scale, count, key, to_q, to_k, order, sorted_keys, query_side, key_side)


def _pass(held: Tensor, plans: list[_Plan]) -> None:
    """Fill every plan's write columns from ``held`` (pos, component, embed_dim), read once, a
    block of POSITIONS positions at a time (a block small enough to stay in the cache while
    every layer reads it): the query side of the block's queries (one batched product, all
    heads), and the key side of every (head, query) row whose key is in the block (keys with
    about as many rows in one batched product, the rows padded by less than 2x)."""
    length = held.shape[0]
    for start in range(0, length, POSITIONS):
        stop = min(start + POSITIONS, length)
        block = held[start:stop]  # (rows, component, embed_dim)
        for plan in plans:
            n, heads = plan.count, plan.key.shape[0]
            at = torch.arange(start, stop).expand(heads, -1)
            pulled = plan.scale * _pulled(
                plan.parts, plan.to_q[:, start:stop], at, plan.parts["w_q"]
            )
            got = torch.bmm(block[:, :n], pulled.permute(1, 2, 0))  # (rows, component, head)
            plan.query_side[:, start:stop, :n] = got.permute(2, 0, 1)
            _key_block(plan, block, start, stop)


def _key_block(plan: _Plan, block: Tensor, start: int, stop: int) -> None:
    """The key side of the rows of ``plan`` whose key lies in start .. stop - 1."""
    lo, hi = torch.searchsorted(plan.sorted_keys, torch.tensor([start, stop])).tolist()
    if lo == hi:
        return
    rows = plan.order[lo:hi]  # flat (head, query) rows, sorted by key
    length = plan.key.shape[1]
    head, query = rows // length, rows % length
    keys = plan.sorted_keys[lo:hi]
    per = plan.key.shape[0] // plan.parts["w_k"].shape[0]
    pulled = _rows_pulled(plan, head // per, plan.to_k[head, query], keys)
    found, counts = torch.unique_consecutive(keys, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    widths = torch.ceil(torch.log2(counts.double())).long()
    n = plan.count
    for width in torch.unique(widths).tolist():  # keys with up to 1, 2, 4, ... rows together
        chosen = torch.nonzero(widths == width)[:, 0]
        steps = torch.arange(2**width)
        index = (starts[chosen, None] + steps).clamp(max=hi - lo - 1)  # (key, width)
        valid = steps < counts[chosen, None]
        got = torch.bmm(pulled[index], block[found[chosen] - start, :n].transpose(1, 2))
        at = index[valid]
        plan.key_side[head[at], query[at], :n] = got[valid]


def _rows_pulled(plan: _Plan, group: Tensor, vectors: Tensor, keys: Tensor) -> Tensor:
    """(rows, embed_dim) scale * D_j W_K^T v for rows of K/V ``group`` (rows,), vectors (rows,
    d_head) and keys (rows,): one product per K/V group (W_K is never gathered per row)."""
    parts = plan.parts
    out = vectors.new_empty(vectors.shape[0], parts["w_k"].shape[-1])
    for g in torch.unique(group).tolist():
        mine = torch.nonzero(group == g)[:, 0]
        out[mine] = vectors[mine] @ parts["w_k"][g]
    out = out * parts["g"] * parts["inv_s"][keys, None]
    if parts["centred"]:
        out = out - out.mean(-1, keepdim=True)
    return plan.scale * out


def attended_marginals(
    sides: Sides, layer: int, scale: float, progress: Callable[[int, int], None] | None = None
) -> dict[str, Tensor]:
    """Of every head of ``layer`` at every query of the one text of ``sides``: "key" (head,
    pos) the key it attends (its highest score), "query_marginal" and "key_marginal" (head,
    pos, component + 1) over ``sides.components(layer)`` then "qk-bias"; each row sums to the
    raw score scale * q . k. ``scale``: the kernel's (score_sides.kernel_scale). Each layer of
    a text in turn: ``every_layer``, which builds the writes once."""
    if sides.runner.batch != 1:
        raise ValueError(f"marginals read one text, got a batch of {sides.runner.batch}")
    parts = _fast_parts(sides, layer)
    writes = sides.writes(layer, slice(None))[:, 0]  # (component, pos, embed_dim)
    if not sides.direct:
        raise ValueError(f"layer {layer}: the at-length marginals need writes by the formula")
    plan = _plan(parts, scale, writes.shape[0] - 1, writes[-1])
    _pass(writes[:-1].transpose(0, 1).contiguous(), [plan])
    if progress is not None:
        progress(1, 1)
    return _out(plan)


def _out(plan: _Plan) -> dict[str, Tensor]:
    return {"key": plan.key, "query_marginal": plan.query_side, "key_marginal": plan.key_side}


def every_layer(
    sides: Sides, scales: list[float], progress: Callable[[int, int], None] | None = None
) -> Iterator[dict[str, Tensor]]:
    """``attended_marginals`` of each layer in turn (a generator). The writes are made once,
    into one (pos, component, embed_dim) buffer filled as the layers go; the rest (the output
    biases) is the stream minus their running sum, checked against the biases."""
    if sides.runner.batch != 1:
        raise ValueError(f"marginals read one text, got a batch of {sides.runner.batch}")
    stream = sides.cache.resid
    blocks = sides.runner.blocks
    total = 1 + sum(b.attention.num_heads + b.has_mlp for b in blocks[:-1])
    held = stream[0].new_empty(stream[0].shape[1], total, stream[0].shape[2])
    held[:, 0] = stream[0][0]
    written, count, biases = stream[0][0].clone(), 1, 0
    plans = []
    for layer in range(sides.layers):
        rest = stream[layer][0] - written
        gap = float((rest - biases).abs().max())
        if gap > LINEAR_TOLERANCE * max(float(stream[layer].abs().max()), 1e-12):
            raise ValueError(f"layer {layer}: the at-length marginals need writes by the formula")
        plans.append(_plan(_fast_parts(sides, layer), scales[layer], count, rest))
        if layer + 1 < sides.layers:
            new, bias = sides.layer_writes(layer, slice(None))  # (part, 1, pos, embed_dim)
            held[:, count : count + new.shape[0]] = new[:, 0].transpose(0, 1)
            count += new.shape[0]
            written += new[:, 0].sum(0)
            biases = biases + bias
    _pass(held, plans)
    del held
    for layer, plan in enumerate(plans):
        if progress is not None:
            progress(layer + 1, sides.layers)
        yield _out(plan)


__all__ = ["attended_marginals", "every_layer"]

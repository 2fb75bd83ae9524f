"""Every head's two marginals at the key each query attends, for a whole text, without running
the q/k maps once per component (score_sides.py does that for chosen pairs).

With the norm in front held (qk_maps.py: q_p = R(p) (W_Q D_p x_p + c_Q), likewise k), the
marginal of a component a on the query side is a dot product of its write at i with one
pulled-back vector, and likewise on the key side at j:

    query side  w_a(i) . scale D_i^T W_Q^T R(i)^T k_j
    key side    w_b(j) . scale D_j^T W_K^T R(j)^T q_i

(constants c_Q, c_K: the "qk-bias" term; R(p): the family's own rotary tables at p, not R(i -
j), which the float32 tables give only up to their rounding).

The writes are held once, position-major (pos, component, embed_dim), and read a block of
``POSITIONS`` positions at a time by a group of ``LAYERS`` receiver layers, each block reading
only the components the group's last layer reads:

- the query side of every head of the group at the block's queries is one batched product over
  the positions: (rows, component, embed_dim) @ (rows, embed_dim, group heads);
- the key side of every (layer, head, query) row of the group whose attended key is in the block
  is one product per key for keys many rows attend (BOS), and one padded batched product for
  the keys with up to 1, 2, 4 ... rows.

No Python loop runs over positions or heads. For families whose map is qk_maps' (else
ValueError, one line; the pair split of score_split.py covers every family).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.circuits.qk_maps import qk_map, turn
from headlab.circuits.score_sides import LINEAR_TOLERANCE, Sides

#: Query rows per block of the attended-key search (scores (head, rows, pos) at a time).
ROWS = 256
#: Positions per block of the pass over the writes ((rows, component, embed_dim) read at once).
POSITIONS = 32
#: Receiver layers that read one block together (their heads side by side in one product).
LAYERS = 5
#: Rows of one key past which the key side takes one product for that key alone.
MANY = 256


@dataclass
class _Plan:
    """One receiver layer, ready for the pass over the writes: ``count`` writes read, the
    attended ``key`` (head, pos), ``to_q`` scale R(i)^T k_j / s_i and ``to_k`` scale R(j)^T q_i
    / s_j (head, pos, d_head), ``w_q`` (head, d_head, embed_dim) and ``w_k`` (kv_head, d_head,
    embed_dim) with the norm's g folded in, so that a pulled-back vector is to_q @ w_q (centred
    for a LayerNorm: ``centred``); the outputs (head, pos, count + 2)."""

    count: int
    centred: bool
    key: Tensor
    to_q: Tensor
    to_k: Tensor
    w_q: Tensor
    w_k: Tensor
    query_side: Tensor
    key_side: Tensor

    @property
    def per(self) -> int:
        return self.w_q.shape[0] // self.w_k.shape[0]

    def centre(self, x: Tensor) -> Tensor:
        return x - x.mean(-1, keepdim=True) if self.centred else x


def _keys(q: Tensor, k: Tensor, per: int) -> Tensor:
    """(head, pos) the key each head's query attends (its highest causal score); q (head, pos,
    d_head), k (kv_head, pos, d_head) rotated."""
    heads, length, _ = q.shape
    key = torch.empty(heads, length, dtype=torch.long)
    positions = torch.arange(length)
    by_group = q.view(-1, per, length, q.shape[-1])  # (kv_head, per, pos, d_head)
    for start in range(0, length, ROWS):
        i = positions[start : start + ROWS]
        seen = k[:, None, : int(i[-1]) + 1]  # the keys up to the block's last query
        scores = by_group[:, :, i] @ seen.transpose(-2, -1)  # (kv_head, per, rows, k_pos)
        scores = scores.masked_fill(positions[: seen.shape[2]] > i[:, None], float("-inf"))
        key[:, i] = scores.argmax(-1).flatten(0, 1)
    return key


def _plan(
    sides: Sides, layer: int, scale: float, count: int, rest: Tensor, tables: dict | None = None
) -> _Plan:
    """The plan of ``layer`` reading its first ``count`` writes; the rest (pos, embed_dim) and
    the q/k maps' constant are filled here (in d_head space), the writes' columns by
    ``_pass``. ``tables``: the rotary tables by head width, shared by the layers of a text."""
    x = sides.cache.resid[layer][0]  # (pos, embed_dim)
    held = qk_map(sides.runner.model, sides.runner.blocks[layer], x.dtype)
    centred, inv_s = held.held(x)
    length, heads, per = x.shape[0], held.w_q.shape[0], held.per
    positions = torch.arange(length)
    kept = {} if tables is None else tables
    if held.w_q.shape[1] not in kept:
        kept[held.w_q.shape[1]] = held.tables(positions)
    tables = kept[held.w_q.shape[1]]

    def projected(stream: Tensor, weight: Tensor) -> Tensor:  # (head, pos, d_head): W D x
        return torch.einsum("pe,hde->hpd", held.linear(stream, centred, inv_s), weight)

    q = turn(projected(x, held.w_q) + held.c_q[:, None], positions, tables)
    k = turn(projected(x, held.w_k) + held.c_k[:, None], positions, tables)
    key = _keys(q, k, per)
    group = torch.arange(heads) // per
    to_q = turn(k[group[:, None], key], positions, tables, back=True)  # R(i)^T k_j
    to_k = turn(q, key, tables, back=True)  # R(j)^T q_i
    query_side = q.new_empty(heads, length, count + 2)
    key_side = q.new_empty(heads, length, count + 2)
    query_side[..., count] = scale * (projected(rest, held.w_q) * to_q).sum(-1)
    rest_k = projected(rest, held.w_k)[group[:, None], key]  # (head, pos, d_head) at j
    key_side[..., count] = scale * (rest_k * to_k).sum(-1)
    query_side[..., count + 1] = scale * (to_q * held.c_q[:, None]).sum(-1)
    key_side[..., count + 1] = scale * (to_k * held.c_k[group][:, None]).sum(-1)
    return _Plan(
        count,
        centred,
        key,
        to_q * (scale * inv_s)[:, None],
        to_k * (scale * inv_s[key])[..., None],
        held.w_q * held.g,
        held.w_k * held.g,
        query_side,
        key_side,
    )


def _query_block(plans: list[_Plan], w_q: Tensor, block: Tensor, start: int, stop: int) -> None:
    """The query side of every head of ``plans`` at positions start .. stop - 1: one batched
    product over the positions, ``block`` (rows, component, embed_dim); ``w_q`` the plans' W_Q
    stacked (group heads, d_head, embed_dim)."""
    pulled = torch.bmm(torch.cat([p.to_q[:, start:stop] for p in plans]), w_q)
    column = 0
    for p in plans:  # (group heads, rows, embed_dim)
        heads = p.key.shape[0]
        if p.centred:
            pulled[column : column + heads] = p.centre(pulled[column : column + heads])
        column += heads
    got = torch.bmm(block, pulled.permute(1, 2, 0))  # (rows, component, group heads)
    column = 0
    for p in plans:
        heads = p.key.shape[0]
        p.query_side[:, start:stop, : p.count] = got[:, : p.count, column : column + heads].permute(
            2, 0, 1
        )
        column += heads


@dataclass
class _KeyRows:
    """(layer, head, query) rows of a group of plans sorted by attended key: ``keys``,
    ``layer`` (index into the group), ``flat`` (head * pos + query); for the rows of keys that
    few rows attend, ``vectors`` (rows, embed_dim) their pulled-back key-side vectors."""

    keys: Tensor
    layer: Tensor
    flat: Tensor
    vectors: Tensor | None = None

    def part(self, chosen: Tensor) -> _KeyRows:
        return _KeyRows(self.keys[chosen], self.layer[chosen], self.flat[chosen])


def _key_rows(plans: list[_Plan]) -> tuple[_KeyRows, _KeyRows]:
    """(the rows of keys that at most ``MANY`` rows of the group attend, with their vectors;
    the rows of the others), each sorted by key."""
    keys = torch.cat([p.key.flatten() for p in plans])
    layer = torch.cat([torch.full((p.key.numel(),), n) for n, p in enumerate(plans)])
    flat = torch.cat([torch.arange(p.key.numel()) for p in plans])
    keys, order = torch.sort(keys, stable=True)
    every = _KeyRows(keys, layer[order], flat[order])
    found, counts = torch.unique_consecutive(keys, return_counts=True)
    many = torch.isin(keys, found[counts > MANY])
    few = every.part(torch.nonzero(~many)[:, 0])
    few.vectors = plans[0].to_k.new_empty(few.keys.shape[0], plans[0].w_k.shape[-1])
    for n, p in enumerate(plans):
        mine = torch.nonzero(few.layer == n)[:, 0]
        length = p.key.shape[1]
        head, query = few.flat[mine] // length, few.flat[mine] % length
        t = p.to_k[head, query]  # (rows, d_head)
        for g in range(p.w_k.shape[0]):
            chosen = torch.nonzero(head // p.per == g)[:, 0]
            few.vectors[mine[chosen]] = p.centre(t[chosen] @ p.w_k[g])
    return few, every.part(torch.nonzero(many)[:, 0])


def _few_block(plans: list[_Plan], rows: _KeyRows, block: Tensor, start: int, stop: int) -> None:
    """The key side of the rows of keys few rows attend, keys in start .. stop - 1: one padded
    batched product per width (keys with up to 1, 2, 4 ... rows)."""
    lo, hi = torch.searchsorted(rows.keys, torch.tensor([start, stop])).tolist()
    if lo == hi:
        return
    keys, vectors = rows.keys[lo:hi], rows.vectors[lo:hi]
    out = vectors.new_empty(hi - lo, block.shape[1])  # (rows, component)
    found, counts = torch.unique_consecutive(keys, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    widths = torch.ceil(torch.log2(counts.double())).long()
    for width in torch.unique(widths).tolist():
        chosen = torch.nonzero(widths == width)[:, 0]
        steps = torch.arange(2**width)
        index = (starts[chosen, None] + steps).clamp(max=hi - lo - 1)  # (key, width)
        valid = steps < counts[chosen, None]
        got = torch.bmm(vectors[index], block[found[chosen] - start].transpose(1, 2))
        out[index[valid]] = got[valid]
    _scatter(plans, rows.layer[lo:hi], rows.flat[lo:hi], out)


def _many_block(plans: list[_Plan], rows: _KeyRows, block: Tensor, start: int, stop: int) -> None:
    """The key side of the rows of keys many rows attend (BOS), keys in start .. stop - 1: per
    key, layer and K/V group, the key's writes through W_K (component, d_head) once, then one
    product with every row's q side (9x fewer products than through the embedding)."""
    lo, hi = torch.searchsorted(rows.keys, torch.tensor([start, stop])).tolist()
    for key in torch.unique(rows.keys[lo:hi]).tolist():
        at = lo + torch.nonzero(rows.keys[lo:hi] == key)[:, 0]
        for n, p in enumerate(plans):
            writes = p.centre(block[key - start, : p.count])  # (component, embed_dim)
            mine = at[rows.layer[at] == n]
            length = p.key.shape[1]
            head, query = rows.flat[mine] // length, rows.flat[mine] % length
            for g in range(p.w_k.shape[0]):
                chosen = torch.nonzero(head // p.per == g)[:, 0]
                through = writes @ p.w_k[g].t()  # (component, d_head)
                got = p.to_k[head[chosen], query[chosen]] @ through.t()
                p.key_side.view(-1, p.count + 2)[rows.flat[mine[chosen]], : p.count] = got


def _scatter(plans: list[_Plan], layer: Tensor, flat: Tensor, out: Tensor) -> None:
    for n, p in enumerate(plans):
        mine = torch.nonzero(layer == n)[:, 0]
        p.key_side.view(-1, p.count + 2)[flat[mine], : p.count] = out[mine, : p.count]


def _pass(held: Tensor, plans: list[_Plan]) -> None:
    """Fill every plan's write columns from ``held`` (pos, component, embed_dim): groups of
    ``LAYERS`` plans, each reading the writes a block of ``POSITIONS`` positions at a time."""
    length = held.shape[0]
    for first in range(0, len(plans), LAYERS):
        group = plans[first : first + LAYERS]
        count = max(p.count for p in group)
        few, many = _key_rows(group)
        w_q = torch.cat([p.w_q for p in group])
        for start in range(0, length, POSITIONS):
            stop = min(start + POSITIONS, length)
            block = held[start:stop, :count]  # (rows, component, embed_dim)
            _query_block(group, w_q, block, start, stop)
            _few_block(group, few, block, start, stop)
            _many_block(group, many, block, start, stop)
        del few, many


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
    qk_map(sides.runner.model, sides.runner.blocks[layer], sides.cache.resid[layer].dtype)
    writes = sides.writes(layer, slice(None))[:, 0]  # (component, pos, embed_dim)
    if not sides.direct:
        raise ValueError(f"layer {layer}: the at-length marginals need writes by the formula")
    plan = _plan(sides, layer, scale, writes.shape[0] - 1, writes[-1])
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
    plans: list[_Plan] = []
    tables: dict = {}
    for layer in range(sides.layers):
        rest = stream[layer][0] - written
        gap = float((rest - biases).abs().max())
        if gap > LINEAR_TOLERANCE * max(float(stream[layer].abs().max()), 1e-12):
            raise ValueError(f"layer {layer}: the at-length marginals need writes by the formula")
        plans.append(_plan(sides, layer, scales[layer], count, rest, tables))
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

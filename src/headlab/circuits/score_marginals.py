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
only the components the group's last layer reads. Both sides of a block are one batched product
over its positions, (rows, component, embed_dim) @ (rows, embed_dim, width): each position's
writes against the pulled-back query-side vectors of every head of the group there and the
key-side vectors of the (layer, head, query) rows attending it, for keys at most ``FEW`` rows
attend, padded to the block's most (the small vectors are padded, never the writes). Keys up to
``MANY`` rows attend take one product of their gathered writes; keys more attend (BOS) take
their writes through W_K once, into d_head space. The rest column (the stream minus the
writes: the output biases) is by linearity the raw score minus every other term of its side.

No Python loop runs over positions or heads. For families whose map is qk_maps' (else
ValueError, one line; the pair split of score_split.py covers every family).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention.one_thread import one_torch_thread
from headlab.circuits.qk_maps import qk_map, turn
from headlab.circuits.score_sides import LINEAR_TOLERANCE, Sides

#: Query rows per block of the attended-key search (scores (head, rows, pos) at a time).
ROWS = 256
#: Positions per block of the pass over the writes ((rows, component, embed_dim) read at once).
POSITIONS = 32
#: Receiver layers that read one block together (their heads side by side in one product).
LAYERS = 5
#: Rows of one key up to which its key side joins the block's product with the query side.
FEW = 24
#: Rows of one key past which the key side takes the product through W_K (d_head space).
MANY = 256


@dataclass
class _Plan:
    """One receiver layer, ready for the pass over the writes: ``count`` writes read, the
    attended ``key`` (head, pos), ``raw`` (head, pos) the raw score scale * q_i . k_j,
    ``to_q`` scale R(i)^T k_j / s_i and ``to_k`` scale R(j)^T q_i / s_j (head, pos, d_head),
    ``w_q`` (head, d_head, embed_dim) and ``w_k`` (kv_head, d_head, embed_dim) with the norm's g
    and centring (a LayerNorm's) folded in, so that a pulled-back vector is to_q @ w_q; the
    outputs (head, pos, count + 2)."""

    count: int
    key: Tensor
    raw: Tensor
    to_q: Tensor
    to_k: Tensor
    w_q: Tensor
    w_k: Tensor
    query_side: Tensor
    key_side: Tensor

    @property
    def per(self) -> int:
        return self.w_q.shape[0] // self.w_k.shape[0]

    def finish(self) -> None:
        """The rest column (the stream minus the writes: the output biases) of each side, by
        linearity the raw score minus every other term of that side."""
        for side in (self.query_side, self.key_side):
            rest = self.raw - side[..., self.count + 1] - side[..., : self.count].sum(-1)
            side[..., self.count] = rest


def _keys(q: Tensor, k: Tensor, per: int) -> Tensor:
    """(head, pos) the key each head's query attends (its highest causal score, the first of
    equal ones); q (head, pos, d_head), k (kv_head, pos, d_head) rotated. Only the block's
    diagonal square is masked."""
    heads, length, d_head = q.shape
    key = torch.empty(heads, length, dtype=torch.long)
    by_group = q.view(-1, per, length, d_head)  # (kv_head, per, pos, d_head)
    later = torch.ones(ROWS, ROWS, dtype=torch.bool).triu(1)
    for start in range(0, length, ROWS):
        stop = min(start + ROWS, length)
        rows = by_group[:, :, start:stop].reshape(k.shape[0], -1, d_head)
        scores = torch.bmm(rows, k[:, :stop].transpose(1, 2))  # (kv_head, per * rows, k_pos)
        scores = scores.view(k.shape[0], per, stop - start, stop)
        scores[..., start:].masked_fill_(later[: stop - start, : stop - start], float("-inf"))
        key[:, start:stop] = scores.argmax(-1).flatten(0, 1)
    return key


def _plan(sides: Sides, layer: int, scale: float, count: int, tables: dict | None = None) -> _Plan:
    """The plan of ``layer`` reading its first ``count`` writes; the q/k maps' constant is
    filled here (in d_head space), the writes' columns by ``_pass``, the rest by ``finish``.
    ``tables``: the rotary tables by head width, shared by the layers of a text."""
    x = sides.cache.resid[layer][0]  # (pos, embed_dim)
    held = qk_map(sides.runner.model, sides.runner.blocks[layer], x.dtype)
    centred, inv_s = held.held(x)
    length, heads, per = x.shape[0], held.w_q.shape[0], held.per
    positions = torch.arange(length)
    kept = {} if tables is None else tables
    if held.w_q.shape[1] not in kept:
        kept[held.w_q.shape[1]] = held.tables(positions)
    tables = kept[held.w_q.shape[1]]
    stream = held.linear(x, centred, inv_s)  # (pos, embed_dim): D x

    def projected(weight: Tensor, constant: Tensor) -> Tensor:  # (head, pos, d_head): W D x + c
        out = (stream @ weight.flatten(0, 1).t()).view(length, weight.shape[0], -1)
        return turn(out.transpose(0, 1) + constant[:, None], positions, tables)

    q, k = projected(held.w_q, held.c_q), projected(held.w_k, held.c_k)
    key = _keys(q, k, per)
    group = torch.arange(heads) // per
    at_key = k[group[:, None], key]  # (head, pos, d_head): k_j
    to_q = turn(at_key, positions, tables, back=True)  # R(i)^T k_j
    to_k = turn(q, key, tables, back=True)  # R(j)^T q_i
    query_side = q.new_empty(heads, length, count + 2)
    key_side = q.new_empty(heads, length, count + 2)
    query_side[..., count + 1] = scale * (to_q * held.c_q[:, None]).sum(-1)
    key_side[..., count + 1] = scale * (to_k * held.c_k[group][:, None]).sum(-1)

    def folded(weight: Tensor) -> Tensor:  # g, and a LayerNorm's centring: C(g * w) rows
        weight = weight * held.g
        return weight - weight.mean(-1, keepdim=True) if centred else weight

    return _Plan(
        count,
        key,
        scale * (q * at_key).sum(-1),
        to_q * (scale * inv_s)[:, None],
        to_k * (scale * inv_s[key])[..., None],
        folded(held.w_q),
        folded(held.w_k),
        query_side,
        key_side,
    )


@dataclass
class _KeyRows:
    """(layer, head, query) rows of a group of plans: ``keys``, ``layer`` (index into the
    group), ``flat`` (head * pos + query), ``slot`` (the row's rank among its key's rows); for
    the rows whose key side takes a padded product, ``vectors`` (rows, embed_dim) their
    pulled-back key-side vectors and ``bounds``: rows ordered by block of positions then layer,
    block b's rows of layer n from bounds[b * layers + n] to bounds[b * layers + n + 1]."""

    keys: Tensor
    layer: Tensor
    flat: Tensor
    slot: Tensor
    vectors: Tensor | None = None
    bounds: list[int] | None = None

    def part(self, chosen: Tensor) -> _KeyRows:
        return _KeyRows(self.keys[chosen], self.layer[chosen], self.flat[chosen], self.slot[chosen])

    def blocked(self, plans: list[_Plan], length: int) -> _KeyRows:
        """These rows ordered by block of ``POSITIONS`` keys, then layer, with their vectors."""
        layers = len(plans)
        code = torch.div(self.keys, POSITIONS, rounding_mode="floor") * layers + self.layer
        code, order = torch.sort(code, stable=True)
        out = self.part(order)
        blocks = -(-length // POSITIONS)
        out.bounds = torch.searchsorted(code, torch.arange(blocks * layers + 1)).tolist()
        out.vectors = plans[0].to_k.new_empty(out.keys.shape[0], plans[0].w_k.shape[-1])
        for n, p in enumerate(plans):
            mine = torch.nonzero(out.layer == n)[:, 0]
            head, query = out.flat[mine] // length, out.flat[mine] % length
            t = p.to_k[head, query]  # (rows, d_head)
            for g in range(p.w_k.shape[0]):
                chosen = torch.nonzero(head // p.per == g)[:, 0]
                out.vectors[mine[chosen]] = t[chosen] @ p.w_k[g]
        return out


def _key_rows(plans: list[_Plan]) -> tuple[_KeyRows, _KeyRows, _KeyRows]:
    """The rows of keys that at most ``FEW`` rows of the group attend, of keys up to ``MANY``
    rows attend (each blocked, with their vectors), and of the others (sorted by key)."""
    keys = torch.cat([p.key.flatten() for p in plans])
    layer = torch.cat([torch.full((p.key.numel(),), n) for n, p in enumerate(plans)])
    flat = torch.cat([torch.arange(p.key.numel()) for p in plans])
    keys, order = torch.sort(keys, stable=True)
    _, counts = torch.unique_consecutive(keys, return_counts=True)
    rows_of_key = counts.repeat_interleave(counts)
    first_of_key = (torch.cumsum(counts, 0) - counts).repeat_interleave(counts)
    slot = torch.arange(keys.shape[0]) - first_of_key
    every = _KeyRows(keys, layer[order], flat[order], slot)
    length = plans[0].key.shape[1]
    few = (rows_of_key <= FEW) & (rows_of_key <= MANY)
    middle = ~few & (rows_of_key <= MANY)
    few = every.part(torch.nonzero(few)[:, 0]).blocked(plans, length)
    some = every.part(torch.nonzero(middle)[:, 0]).blocked(plans, length)
    return few, some, every.part(torch.nonzero(rows_of_key > MANY)[:, 0])


def _scatter(
    plans: list[_Plan], rows: _KeyRows, index: int, got: Tensor, at: Tensor, column: Tensor
) -> None:
    """The key side of block ``index``'s rows from ``got`` (n, width, component): row r's at
    got[at[r], column[r]]."""
    layers = len(plans)
    lo = rows.bounds[index * layers]
    found = got.flatten(0, 1)[at * got.shape[1] + column]  # (rows, component)
    for n, p in enumerate(plans):
        a, z = rows.bounds[index * layers + n], rows.bounds[index * layers + n + 1]
        if z > a:
            p.key_side.view(-1, p.count + 2)[rows.flat[a:z], : p.count] = found[
                a - lo : z - lo, : p.count
            ]


def _block(
    plans: list[_Plan], w_q: Tensor, few: _KeyRows, buffer: Tensor, block: Tensor, start: int
) -> None:
    """Both sides at positions start .. start + rows - 1 in one batched product over the
    positions, ``block`` (rows, component, embed_dim): each position's writes against the
    pulled-back query-side vectors of every head of ``plans`` there and the key-side vectors
    of the rows attending it (keys few rows attend), padded to the block's most such rows;
    ``w_q`` the plans' W_Q stacked (group heads, d_head, embed_dim), ``buffer`` (POSITIONS,
    group heads + FEW, embed_dim) the padded vectors' room."""
    index, positions = start // POSITIONS, block.shape[0]
    heads, layers = w_q.shape[0], len(plans)
    pulled = torch.bmm(torch.cat([p.to_q[:, start : start + positions] for p in plans]), w_q)
    lo, hi = few.bounds[index * layers], few.bounds[(index + 1) * layers]
    at, column = few.keys[lo:hi] - start, heads + few.slot[lo:hi]
    width = heads + (int(few.slot[lo:hi].max()) + 1 if hi > lo else 0)
    vectors = buffer[:positions, :width]
    vectors[:, :heads] = pulled.transpose(0, 1)  # (rows, group heads, embed_dim)
    vectors[at, column] = few.vectors[lo:hi]
    got = torch.bmm(vectors, block.transpose(1, 2))  # (rows, width, component)
    first = 0
    for p in plans:
        mine = got[:, first : first + p.key.shape[0], : p.count]
        p.query_side[:, start : start + positions, : p.count] = mine.transpose(0, 1)
        first += p.key.shape[0]
    _scatter(plans, few, index, got, at, column)


def _some_block(plans: list[_Plan], rows: _KeyRows, block: Tensor, start: int) -> None:
    """The key side of the rows of keys a few dozen rows attend, keys in the block: their
    writes gathered (few keys) against their rows' vectors, padded, in one batched product."""
    index, layers = start // POSITIONS, len(plans)
    lo, hi = rows.bounds[index * layers], rows.bounds[(index + 1) * layers]
    if lo == hi:
        return
    found, at = torch.unique(rows.keys[lo:hi], return_inverse=True)
    slot = rows.slot[lo:hi]
    vectors = rows.vectors.new_zeros(found.shape[0], int(slot.max()) + 1, rows.vectors.shape[1])
    vectors[at, slot] = rows.vectors[lo:hi]
    got = torch.bmm(vectors, block[found - start].transpose(1, 2))  # (key, width, component)
    _scatter(plans, rows, index, got, at, slot)


def _many_block(plans: list[_Plan], rows: _KeyRows, block: Tensor, start: int, stop: int) -> None:
    """The key side of the rows of keys many rows attend (BOS), keys in start .. stop - 1: per
    key, layer and K/V group, the key's writes through W_K (component, d_head) once, then one
    product with every row's q side (9x fewer products than through the embedding)."""
    lo, hi = torch.searchsorted(rows.keys, torch.tensor([start, stop])).tolist()
    for key in torch.unique(rows.keys[lo:hi]).tolist():
        at = lo + torch.nonzero(rows.keys[lo:hi] == key)[:, 0]
        for n, p in enumerate(plans):
            writes = block[key - start, : p.count]  # (component, embed_dim)
            mine = at[rows.layer[at] == n]
            length = p.key.shape[1]
            head, query = rows.flat[mine] // length, rows.flat[mine] % length
            for g in range(p.w_k.shape[0]):
                chosen = torch.nonzero(head // p.per == g)[:, 0]
                through = writes @ p.w_k[g].t()  # (component, d_head)
                got = p.to_k[head[chosen], query[chosen]] @ through.t()
                p.key_side.view(-1, p.count + 2)[rows.flat[mine[chosen]], : p.count] = got


def _pass(held: Tensor, plans: list[_Plan]) -> None:
    """Fill every plan's write columns from ``held`` (pos, component, embed_dim): groups of
    ``LAYERS`` plans, each reading the writes a block of ``POSITIONS`` positions at a time;
    then each plan's rest column."""
    length = held.shape[0]
    for first in range(0, len(plans), LAYERS):
        group = plans[first : first + LAYERS]
        count = max(p.count for p in group)
        few, some, many = _key_rows(group)
        w_q = torch.cat([p.w_q for p in group])
        buffer = held.new_zeros(POSITIONS, w_q.shape[0] + FEW, held.shape[-1])
        for start in range(0, length, POSITIONS):
            stop = min(start + POSITIONS, length)
            block = held[start:stop, :count]  # (rows, component, embed_dim)
            _block(group, w_q, few, buffer, block, start)
            _some_block(group, some, block, start)
            _many_block(group, many, block, start, stop)
        del few, some, many, buffer
    for plan in plans:
        plan.finish()


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
    with one_torch_thread(when_busy=True):
        plan = _plan(sides, layer, scale, writes.shape[0] - 1)
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
    biases) is the stream minus their running sum, checked against the biases. On one torch
    thread while another process competes for the cores (one_thread.py: the pass's many small
    ops would each wait in an OpenMP barrier for a descheduled thread)."""
    if sides.runner.batch != 1:
        raise ValueError(f"marginals read one text, got a batch of {sides.runner.batch}")
    with one_torch_thread(when_busy=True):
        plans = _every_plan(sides, scales)
    for layer, plan in enumerate(plans):
        if progress is not None:
            progress(layer + 1, sides.layers)
        yield _out(plan)


def _every_plan(sides: Sides, scales: list[float]) -> list[_Plan]:
    """Every layer's plan, filled: the writes made once into the held buffer, then one pass."""
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
        plans.append(_plan(sides, layer, scales[layer], count, tables))
        if layer + 1 < sides.layers:
            new, bias = sides.layer_writes(layer, slice(None))  # (part, 1, pos, embed_dim)
            held[:, count : count + new.shape[0]] = new[:, 0].transpose(0, 1)
            count += new.shape[0]
            written += new[:, 0].sum(0)
            biases = biases + bias
    _pass(held, plans)
    return plans


__all__ = ["attended_marginals", "every_layer"]

"""Every head's two marginals at the key each query attends, for a whole text, without running
the q/k maps once per component (score_sides.py does that for chosen pairs).

With the norm in front held at its scale 1/s_p at each position p, a head's raw query and key
are affine: q_p = W_Q D_p x_p + c_Q, k_p = W_K D_p x_p + c_K, D_p x = g * C(x) / s_p (C: the
centring of a LayerNorm, else the identity), and rotary makes the score
scale * (R(i) q_i) . (R(j) k_j) (R(p): the family's own tables at position p, rotary_offsets.py;
not R(i - j), which the float32 tables give only up to their rounding). So the marginal of a
component a on the query side is a dot product of its write at i with one pulled-back vector,
and likewise on the key side at j:

    query side  w_a(i) . scale D_i W_Q^T R(i)^T R(j) k_j
    key side    w_b(j) . scale D_j W_K^T R(j)^T R(i) q_i

(constants c_Q, c_K: the "qk-bias" term). Each pulled-back vector costs a d_head x embed_dim
product; the dot products with every component's write cost what reading the writes costs. The
writes at all positions are held (component x pos x embed_dim) and read once per receiver layer
on each side (the key side grouped by key position). For families whose map is that: a scaled
norm in front, no QK-norm, writes by the formula, rotate-half rotary or none (else ValueError,
one line; the pair split of score_split.py covers every family).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from headlab.circuits.frozen_norms import held_scale, norm_form, norms_of
from headlab.circuits.rotary_offsets import rotations
from headlab.circuits.score_sides import Sides

#: Query rows per block of the attended-key search (scores (head, rows, pos) at a time).
ROWS = 256


def _fast_parts(sides: Sides, layer: int) -> dict:
    """What the marginals need of ``layer``: W_Q, W_K, the norm's g, shift, centring and 1/s
    per position, the projections' constants and the raw (pre-rotary) q, k; ValueError where
    the layer's map is not the one of the module docstring."""
    block = sides.runner.blocks[layer]
    attention = block.attention
    if attention.input_norm is None or norms_of(attention.module):
        raise ValueError(
            f"layer {layer}: the at-length marginals need one norm in front and no QK-norm; "
            "split chosen pairs instead (why-attends)"
        )
    w_q, w_k = (w.detach() for w in attention.query_key_weights())
    module = attention.input_norm.module
    x = sides.cache.resid[layer][0]  # (pos, embed_dim)
    form = norm_form(module)
    with torch.no_grad():
        y = module(x[None])[0]
    centred, inv_s = held_scale(x, y, form)
    g, shift = form[0].to(x), form[1].to(x)
    n = (x - x.mean(-1, keepdim=True) if centred else x) * g * inv_s + shift  # held: as split
    bias_q = _bias(attention.query)
    bias_k = _bias(attention.key)
    c_q = w_q @ shift + (0 if bias_q is None else bias_q)
    c_k = w_k @ shift + (0 if bias_k is None else bias_k)
    centre = n - shift  # the held norm's linear part; the constants hold the shift
    return {"w_q": w_q.to(x), "w_k": w_k.to(x), "g": g, "inv_s": inv_s[:, 0], "centred": centred,
            "q": centre @ w_q.t().to(x) + c_q, "k": centre @ w_k.t().to(x) + c_k,
            "c_q": c_q.to(x), "c_k": c_k.to(x)}  # fmt: skip


def _bias(projection) -> Tensor | None:
    bias = getattr(projection.module, "bias", None)
    if bias is None:
        return None
    return bias.detach()[list(projection.rows)]


def _pulled(parts: dict, vectors: Tensor, positions: Tensor, weight: Tensor) -> Tensor:
    """(rows, embed_dim): D_p W^T v for each row's vector v (rows, d_head*) and position p."""
    out = (vectors @ weight) * parts["g"] * parts["inv_s"][positions, None]
    if parts["centred"]:
        out = out - out.mean(-1, keepdim=True)
    return out


def attended_marginals(
    sides: Sides, layer: int, scale: float, progress: Callable[[int, int], None] | None = None,
    writes: Tensor | None = None,
) -> dict[str, Tensor]:
    """Of every head of ``layer`` at every query of the one text of ``sides``: "key" (head,
    pos) the key it attends (its highest score), "query_marginal" and "key_marginal" (head,
    pos, component + 1) over ``sides.components(layer)`` then "qk-bias"; each row sums to the
    raw score scale * q . k. ``scale``: the kernel's (score_sides.kernel_scale). ``writes``:
    (component, pos, embed_dim) the layer's writes where the caller keeps them (``every_layer``),
    else made here."""
    if sides.runner.batch != 1:
        raise ValueError(f"marginals read one text, got a batch of {sides.runner.batch}")
    parts = _fast_parts(sides, layer)
    attention = sides.runner.blocks[layer].attention
    heads, groups, d = attention.num_heads, attention.num_kv_heads, attention.head_dim
    length = sides.runner.ids.shape[1]
    if writes is None:
        writes = sides.writes(layer, slice(None))[:, 0]  # (component, pos, embed_dim)
        if not sides.direct:
            raise ValueError(f"layer {layer}: the at-length marginals need writes by the formula")
    turns = _turns(sides, length, d, writes.dtype)  # (offset, 2, d_head, d_head)
    q = parts["q"].view(length, heads, d).transpose(0, 1)  # (head, pos, d_head)
    k = parts["k"].view(length, groups, d).transpose(0, 1)
    per = heads // groups
    count = writes.shape[0] + 1
    key = torch.empty(heads, length, dtype=torch.long)
    query_side = writes.new_empty(heads, length, count)
    key_side = writes.new_empty(heads, length, count)
    positions = torch.arange(length)
    turn = turns[:, 0]  # R(p) (pos, d_head, d_head), the tables the kernel's rotary reads
    q = torch.einsum("pde,hpe->hpd", turn, q)  # the kernel's q and k, norms held
    k = torch.einsum("pde,hpe->hpd", turn, k)
    for h in range(heads):
        g = h // per
        rows_q = parts["w_q"][h * d : (h + 1) * d]  # (d_head, embed_dim)
        rows_k = parts["w_k"][g * d : (g + 1) * d]
        c_q, c_k = parts["c_q"][h * d : (h + 1) * d], parts["c_k"][g * d : (g + 1) * d]
        for start in range(0, length, ROWS):
            i = positions[start : start + ROWS]
            scores = q[h, i] @ k[g].t()  # (rows, pos)
            j = scores.masked_fill(positions[None] > i[:, None], float("-inf")).argmax(-1)
            key[h, i] = j
            to_q = torch.einsum("rde,rd->re", turn[i], k[g, j])  # R(i)^T k_j
            to_k = torch.einsum("rde,rd->re", turn[j], q[h, i])  # R(j)^T q_i
            pulled_q = scale * _pulled(parts, to_q, i, rows_q)  # (rows, embed_dim)
            query_side[h, i, :-1] = torch.einsum("re,cre->rc", pulled_q, writes[:, i])
            query_side[h, i, -1] = scale * (to_q @ c_q)
            key_side[h, i, -1] = scale * (to_k @ c_k)
            key_side[h, i, :-1] = _by_key(scale * _pulled(parts, to_k, j, rows_k), j, writes)
        if progress is not None:
            progress(h + 1, heads)
    return {"key": key, "query_marginal": query_side, "key_marginal": key_side}


def every_layer(sides: Sides, scales: list[float], progress=None):
    """``attended_marginals`` of each layer in turn (a generator), the writes built once: each
    layer's heads and MLP added to the held writes as the layers go (the output biases' rest
    recomputed per layer), not remade from layer 0 for every layer."""
    stream = sides.cache.resid
    held = [stream[0][0]]  # the writes so far, (pos, embed_dim) each
    for layer in range(sides.layers):
        found = torch.stack(held)
        rest = stream[layer][0] - found.sum(0)
        writes = torch.cat([found, rest[None]])
        yield attended_marginals(sides, layer, scales[layer], progress, writes)
        del writes, found
        if layer + 1 < sides.layers:
            new, _ = sides.layer_writes(layer, slice(None))
            held += list(new[:, 0])


def _by_key(pulled: Tensor, keys: Tensor, writes: Tensor) -> Tensor:
    """(rows, component): each row's pulled vector dotted with every component's write at its
    key, the rows grouped by key so that each key's writes are read once."""
    out = pulled.new_empty(pulled.shape[0], writes.shape[0])
    order = torch.argsort(keys)
    found, counts = torch.unique_consecutive(keys[order], return_counts=True)
    start = 0
    for position, n in zip(found.tolist(), counts.tolist(), strict=True):
        rows = order[start : start + n]
        out[rows] = pulled[rows] @ writes[:, position].t()
        start += n
    return out


def _turns(sides: Sides, length: int, head_dim: int, dtype: torch.dtype) -> Tensor:
    """(pos, 2, d_head, d_head): (R(p), R(0)) for positions 0 .. length - 1, the identity for
    a family without rotary."""
    try:
        return rotations(sides.runner.model, range(length), head_dim).to(dtype)
    except ValueError as error:
        if "has none" not in str(error):
            raise
    eye = torch.eye(head_dim, dtype=dtype)
    return eye.expand(length, 2, head_dim, head_dim)


__all__ = ["attended_marginals", "every_layer"]

"""Edits of one transformers attention module: heads removed, new W_Q and W_K.

Each returns the modules to put in place (path -> module, for ``tree.replaced``); nothing is
changed in place. Neither names a family: they read the layer's sizes and projections
(``HFAttentionLayer``, found by probe.py) and the module's own parameters.

Removing heads (``without_heads``) works for the common layout, whatever the names:

    every projection inside the module is an ``nn.Linear`` with one head's rows after another:
    out = heads * d_head (the queries: rows of the removed heads go) or kv_heads * d_head (keys,
    values: a K/V head goes with the last query head that reads it; when the kept query heads no
    longer split evenly over the kept K/V heads, each gets its own copy of its K/V rows)
    the output projection (found by the probe, inside the module or in its parent) is an
    ``nn.Linear``: the removed heads' input columns go
    norms inside the module hold one weight per position of a head (d_head: QK-norm per head,
    shared by every head, kept); a parameter of the module itself with one entry per query head
    (gpt-oss' sinks) loses the removed heads' entries

Anything else is refused with a ValueError naming the family and what does not fit: a fused
projection (queries, keys and values of every head in one matrix: Phi-3's qkv_proj, GPT-2's
c_attn, GPT-NeoX's query_key_value), a norm over all heads at once (OLMo 2: removing a head would
change the others' queries), an output projection that is not a Linear. The adapter checks
every removal against masking the same heads (same output on a short input) before returning it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from headlab.attention.trace import AttentionTrace
from headlab.models.hf.layer import HFAttentionLayer
from headlab.models.hf.tree import replaced


class NoHeads(nn.Module):
    """An attention module with every head removed: it outputs what its output projection makes
    of no heads (the bias, or zeros), and (batch, pos, 0) when that projection sits outside it."""

    def __init__(self, output: nn.Linear | None, outside_bias: Tensor | None = None) -> None:
        super().__init__()
        self.output = output
        # what the output projection outside it adds (its bias; None: nothing), for the trace
        self.register_buffer("outside_bias", outside_bias, persistent=False)

    def forward(self, hidden_states: Tensor, *args: object, **kwargs: object):
        empty = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)  # (batch, pos, 0)
        return (empty if self.output is None else self.output(empty)), None


def no_heads_trace(layer: HFAttentionLayer, batch: int, pos: int) -> AttentionTrace:
    """The trace of a layer whose every head was removed (its module a ``NoHeads``): no heads in
    any site (head axes of size 0), and the output the module adds, the same on every position
    (its output projection's bias, or zeros)."""
    module = layer.module
    hidden = torch.zeros(batch, pos, layer.embed_dim)  # NoHeads reads only the shape
    with torch.no_grad():
        output = module(hidden)[0]
    if module.output is None:  # W_O sits outside the module: what it adds is its bias
        bias = module.outside_bias
        output = hidden if bias is None else hidden + bias.to(hidden.dtype)
    d = layer.head_dim

    def none(*shape: int) -> Tensor:
        return hidden.new_zeros(batch, 0, pos, *shape)  # (batch, head=0, q_pos, ...)

    return AttentionTrace(
        q=none(d),
        k=none(d),
        v=none(d),
        scores=none(pos),
        weights=none(pos),
        head_outputs=none(d),
        contributions=none(layer.embed_dim),
        output=output,
    )


def _refuse(layer: HFAttentionLayer, what: str) -> ValueError:
    return ValueError(
        f"family {layer.family!r} ({type(layer.module).__name__}): heads cannot be removed from "
        f"its weights: {what}; prune by masking instead (by=mask)"
    )


def _check_output(layer: HFAttentionLayer) -> None:
    output = layer.output
    if output is None or not isinstance(output.module, nn.Linear):
        found = "none found" if output is None else type(output.module).__name__
        raise _refuse(layer, f"its output projection is not an nn.Linear ({found})")


def _linear(weight: Tensor, bias: Tensor | None, like: nn.Linear) -> nn.Linear:
    """An nn.Linear holding copies of ``weight`` (out, in) and ``bias`` (also with no rows or
    no columns), in ``like``'s mode."""
    new = nn.Linear(1, 1, bias=bias is not None, device="meta")
    new.weight = nn.Parameter(weight.detach().clone(), like.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias.detach().clone(), like.bias.requires_grad)
    new.out_features, new.in_features = weight.shape
    return new.train(like.training)


def _rows(linear: nn.Linear, rows: list[int]) -> nn.Linear:
    """``linear`` with only the outputs ``rows``."""
    bias = None if linear.bias is None else linear.bias[rows]
    return _linear(linear.weight[rows], bias, linear)


def _columns(linear: nn.Linear, columns: list[int]) -> nn.Linear:
    """``linear`` with only the inputs ``columns`` (the bias kept)."""
    return _linear(linear.weight[:, columns], linear.bias, linear)


def _head_rows(indices: list[int], d: int) -> list[int]:
    return [r for i in indices for r in range(i * d, (i + 1) * d)]


def kept_kv(heads: int, kv_heads: int, keep: list[int]) -> tuple[list[int], int]:
    """(the K/V head each kept query head's new K/V head copies, in order; how many of them are
    copies): one per kept group when the kept heads split evenly over them, one per kept query
    head otherwise."""
    group = heads // kv_heads
    kv_of = [i // group for i in keep]
    kv_keep = sorted(set(kv_of))
    per = len(keep) // len(kv_keep)
    even = len(keep) % len(kv_keep) == 0 and all(
        kv_of[j] == kv_keep[j // per] for j in range(len(keep))
    )
    rows = kv_keep if even else kv_of
    return rows, len(rows) - len(kv_keep)


@dataclass(frozen=True)
class Removal:
    """What removing heads from one layer gives: the modules to put in place (path -> module),
    the kept query and K/V heads, and how many parameters are copies of kept K/V rows."""

    modules: dict[str, nn.Module]
    heads: int
    kv_heads: int
    copied: int = 0


def without_heads(layer: HFAttentionLayer, remove: Iterable[int]) -> Removal:
    """``layer`` without the query heads ``remove`` (see the module docstring). Raises
    ValueError for a head out of range or a layout it cannot cut."""
    heads, kv_heads, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
    remove = set(remove)
    bad = sorted(h for h in remove if not 0 <= h < heads)
    if bad:
        raise ValueError(f"head indices must be in [0, {heads}), got {bad}")
    if layer.view is not None:
        raise ValueError("heads cannot be removed from a view of merged heads")
    output = layer.output
    keep = [h for h in range(heads) if h not in remove]
    new: dict[str, nn.Module] = {}
    if not keep:
        _check_output(layer)
        inside = output.path.startswith(layer.path + ".")
        out = _columns(output.module, []) if inside else None
        bias = None
        if not inside:
            new[output.path] = _columns(output.module, [])
            bias = None if output.module.bias is None else output.module.bias.detach().clone()
        new[layer.path] = NoHeads(out, bias)
        return Removal(new, 0, 0)
    kv_rows, copies = kept_kv(heads, kv_heads, keep)
    copied = 0
    children: dict[str, nn.Module] = {}
    for name, child in layer.module.named_modules():
        if not name or (output is not None and child is output.module):
            continue
        weight = getattr(child, "weight", None)
        if isinstance(weight, Tensor) and weight.dim() == 2:
            if not isinstance(child, nn.Linear):
                what = f"{type(child).__name__} {tuple(weight.shape)}"
                raise _refuse(layer, f"its projection {name} is a {what}, not an nn.Linear")
            if child.out_features == heads * d:
                children[name] = _rows(child, _head_rows(keep, d))
            elif child.out_features == kv_heads * d:
                children[name] = _rows(child, _head_rows(kv_rows, d))
                copied += copies * d * (child.in_features + int(child.bias is not None))
            else:
                raise _refuse(
                    layer,
                    f"{name} makes {child.out_features} outputs, neither the queries "
                    f"({heads} x {d}) nor the keys or values ({kv_heads} x {d}) alone: a fused "
                    "projection",
                )
            continue
        for pname, parameter in child.named_parameters(recurse=False):
            if parameter.shape != (d,) and any(
                s in (heads * d, kv_heads * d) for s in parameter.shape
            ):
                raise _refuse(
                    layer,
                    f"{name}.{pname} ({tuple(parameter.shape)}) normalises over all heads at "
                    "once, so removing a head would change the others",
                )
    _check_output(layer)
    inside = output.path.startswith(layer.path + ".")
    direct = {}
    for pname, parameter in layer.module.named_parameters(recurse=False):
        if parameter.shape[:1] != (heads,):
            raise _refuse(layer, f"its parameter {pname} {tuple(parameter.shape)} is not per head")
        direct[pname] = nn.Parameter(parameter.detach()[keep].clone(), parameter.requires_grad)
    columns = _columns(output.module, _head_rows(keep, d))
    if inside:
        children[output.path[len(layer.path) + 1 :]] = columns
    else:
        new[output.path] = columns
    attention = replaced(layer.module, children)
    for pname, parameter in direct.items():
        setattr(attention, pname, parameter)
    new[layer.path] = attention
    return Removal(new, len(keep), len(kv_rows), copied)


def with_query_key(layer: HFAttentionLayer, w_q: Tensor, w_k: Tensor) -> dict[str, nn.Module]:
    """path -> new projection module with the rows of W_Q and W_K replaced by ``w_q``
    (heads * d_head, embed) and ``w_k`` (kv_heads * d_head, embed). Raises ValueError where the
    layer has no W_Q/W_K or the shapes differ."""
    old_q, old_k = layer.query_key_weights()
    for name, new, old in (("W_Q", w_q, old_q), ("W_K", w_k, old_k)):
        if tuple(new.shape) != tuple(old.shape):
            raise ValueError(f"{name} must have shape {tuple(old.shape)}, got {tuple(new.shape)}")
    copies: dict[str, nn.Module] = {}
    for projection, weight in ((layer.query, w_q), (layer.key, w_k)):
        module = copies.setdefault(projection.path, copy.deepcopy(projection.module))
        rows = list(projection.rows)
        with torch.no_grad():
            target = module.weight.t() if projection.transposed else module.weight
            target[rows] = weight.to(target.dtype)
    return copies

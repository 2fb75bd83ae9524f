"""The gradient runs of edge attribution (attribution.py) and, from them, the metric's gradient
at each receiver's input a block of positions at a time.

A run (``gradient_run``) is one forward and one backward of the model that keeps the metric's
gradient where each receiver layer's inputs are read: at the outputs of the q, k, v projections
(the sliced path of receiver_grads.py) or at the sites q, k, v (its generic path), at each
MLP's input, and at the last block's output (the logits' input). ``receiver_rows`` takes those
to the residual stream entering the receiver's layer at a block of positions: the maps between
act on each position alone.
"""

from __future__ import annotations

from collections.abc import Collection
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.graph import Graph
from headlab.circuits.patching import Patcher
from headlab.circuits.receiver_grads import Receiver, SlicedReceivers, site_input_grads
from headlab.circuits.resume import Cache, Runner
from headlab.models.run_protocol import StopAt, kept_outputs


@dataclass
class GradientRun:
    """One forward and backward: the stream entering each block, each layer's head outputs,
    and the metric's gradient where each receiver layer's inputs are read."""

    resid: list[Tensor]
    head_outputs: list[Tensor]
    site_grads: list[dict[str, Tensor]]  # per layer (generic path): q (batch, head, pos, d_head)
    output_grads: list[list[Tensor]]  # per layer (sliced path): per projection (batch, pos, out)
    mlp_grads: list[Tensor | None]  # per layer: (batch, pos, embed_dim) at the MLP's input
    final_grad: Tensor  # (batch, pos, embed_dim) at the last block's output


def _mlp_input(store: dict, key: tuple):
    """An intervention at mlp_in that hands the MLP a view of its input and keeps it: the
    gradient at the view is the gradient through the MLP alone (where attention reads the same
    tensor, GPT-J)."""

    def keep(t: Tensor) -> Tensor:
        store[key] = t.view_as(t)
        return store[key]

    return keep


def _into(store: list, index: int, detach: bool = True):
    def keep(t: Tensor) -> None:
        store[index] = t.detach() if detach else t

    return keep


def gradient_run(
    patcher: Patcher,
    hidden: Tensor,
    clean: bool,
    start: int = 0,
    moving=lambda stack: None,
    layers: Collection[int] | None = None,
    plans: dict[int, SlicedReceivers | None] | None = None,
) -> GradientRun:
    """The run from ``hidden`` (the stream entering layer ``start``; the layers before it are
    the clean run's, and no receiver may be there) with the hooks ``moving`` entered first;
    ``clean``: it is the clean run, whose stream and head outputs the patcher holds already
    (not kept twice). What receivers read (stream, head outputs, gradients at the sites) is
    kept for ``layers`` alone (default: every layer from ``start``), so that the backward
    stops at the first of them. plans: per layer, its receivers' sliced path (receiver_grads.py:
    the gradient kept at the projections' outputs), None or absent: the generic one (at the
    sites)."""
    n = len(patcher.runner.blocks)
    resid: list = list(patcher.clean.resid[:n])
    heads: list = list(patcher.clean.head_outputs)
    kept = None if clean else (resid, heads)
    got = _backward(
        patcher.runner, patcher.metric, hidden, start, moving, layers, plans or {}, kept
    )
    return _assembled(got, resid, heads, plans or {})


def clean_gradient_run(
    runner: Runner, metric, layers: Collection[int], plans: dict[int, SlicedReceivers | None]
) -> tuple[GradientRun, Cache]:
    """EAP's run on the clean input, from layer 0, keeping also what ``Runner.cache`` keeps
    (the stream entering each block and leaving the last, head outputs, MLP outputs, the
    metric's logits): the clean Cache without a forward of its own, its tensors those of the
    run (nothing held twice)."""
    n = len(runner.blocks)
    resid: list = [None] * (n + 1)
    heads: list = [None] * n
    mlp: list = [None] * n
    logits: list[Tensor] = []

    def keeping(stack: ExitStack) -> None:
        for block in runner.blocks:
            i = block.index
            stack.enter_context(intervene(block, "resid_in", _into(resid, i)))
            stack.enter_context(intervene(block.attention, "head_outputs", _into(heads, i)))
            if block.has_mlp:
                stack.enter_context(intervene(block, "mlp_out", _into(mlp, i)))
        stack.enter_context(intervene(runner.blocks[-1], "resid_out", _into(resid, n)))

    def measured(values: Tensor) -> Tensor:
        logits.append(values.detach())
        return metric(values)

    got = _backward(runner, measured, runner.stream_in(), 0, keeping, layers, plans, None)
    cache = Cache(resid, heads, mlp, logits[0])
    return _assembled(got, resid[:n], heads, plans), cache


def _backward(
    runner: Runner,
    metric,
    hidden: Tensor,
    start: int,
    moving,
    layers: Collection[int] | None,
    plans: dict[int, SlicedReceivers | None],
    kept: tuple[list, list] | None,
) -> dict[tuple, Tensor]:
    """One forward from ``hidden`` at layer ``start`` and the backward of ``metric``: the
    gradients gradient_run keeps, by (layer, site or projection or "mlp") and ("final",).
    kept: the lists where the stream entering each block and the head outputs go (None: they
    are the clean run's, kept already)."""
    tensors: dict[tuple, Tensor] = {}
    resid, heads = kept if kept is not None else ([], [])

    def hooks(stack: ExitStack) -> None:
        moving(stack)
        for block in runner.blocks[start:]:
            i = block.index
            if layers is not None and i not in layers:
                continue
            if kept is not None:
                stack.enter_context(intervene(block, "resid_in", _into(resid, i)))
                stack.enter_context(intervene(block.attention, "head_outputs", _into(heads, i)))
            plan = plans.get(i)
            if plan is None:
                for site in ("q", "k", "v"):
                    keep_site = lambda t, key=(i, site): tensors.__setitem__(key, t)  # noqa: E731
                    stack.enter_context(intervene(block.attention, site, keep_site))
            else:
                keys = [(i, j) for j in range(len(plan.modules))]
                stack.enter_context(kept_outputs(plan.modules, tensors, keys))
            if block.has_mlp:
                stack.enter_context(intervene(block, "mlp_in", _mlp_input(tensors, (i, "mlp"))))
        last = lambda t: tensors.__setitem__(("final",), t)  # noqa: E731
        stack.enter_context(intervene(runner.blocks[-1], "resid_out", last))

    x = hidden.detach().requires_grad_(True)
    with torch.enable_grad():
        value = metric(runner.forward(start, x, 1, hooks))[0]
        # a cut output is a constant: the receivers that feed only it get no gradient
        keys = [k for k, t in tensors.items() if t.requires_grad]
        grads = torch.autograd.grad(value, [tensors[k] for k in keys], allow_unused=True)
    got = {k: g for k, g in zip(keys, grads, strict=True) if g is not None}
    got.update({k: torch.zeros_like(t) for k, t in tensors.items() if k not in got})
    tensors.clear()  # the graph's tensors go with it
    return got


def _assembled(
    got: dict[tuple, Tensor], resid: list, heads: list, plans: dict[int, SlicedReceivers | None]
) -> GradientRun:
    n = len(heads)
    output_grads = [
        [got[(i, j)] for j in range(len(plans[i].modules))] if plans.get(i) else []
        for i in range(n)
    ]
    return GradientRun(
        resid=resid,
        head_outputs=heads,
        site_grads=[{s: got.get((i, s)) for s in ("q", "k", "v")} for i in range(n)],
        output_grads=output_grads,
        mlp_grads=[got.get((i, "mlp")) for i in range(n)],
        final_grad=got[("final",)],
    )


def _attention_input_grads(
    patcher: Patcher,
    run: GradientRun,
    layer: int,
    receivers: list[Receiver],
    plan: SlicedReceivers | None,
    rows: slice,
) -> list[Tensor]:
    """dm/dx_v at the positions ``rows`` for each of ``receivers`` ((site, head or group) of
    ``layer``), each (batch, rows, embed_dim): the sliced path where ``plan`` is one, else the
    generic (receiver_grads.py)."""
    x = run.resid[layer][:, rows]
    if plan is not None:
        return list(plan.grads(x, [g[:, rows] for g in run.output_grads[layer]]))
    site_grads = {s: g[:, :, rows] for s, g in run.site_grads[layer].items()}
    return list(site_input_grads(patcher.runner, layer, x, rows, site_grads, receivers))


def _mlp_input_grad(patcher: Patcher, run: GradientRun, layer: int, rows: slice) -> Tensor:
    """dm/dx at ``rows`` through layer ``layer``'s MLP alone: the run's gradient at the MLP's
    input taken back to the stream entering the layer (its heads held at this run's outputs):
    the block runs up to the MLP's input, nothing of the MLP itself."""
    block = patcher.runner.blocks[layer]
    x = run.resid[layer][:, rows].clone().requires_grad_(True)
    frozen = run.head_outputs[layer][:, :, rows]

    def hooks(stack: ExitStack) -> None:
        stack.enter_context(intervene(block.attention, "head_outputs", lambda t: frozen))

    with torch.enable_grad():
        into = patcher.runner.forward(layer, x, 1, hooks, rows, StopAt(layer, "mlp_in"))
        (gx,) = torch.autograd.grad(into, x, grad_outputs=run.mlp_grads[layer][:, rows])
    return gx


def receiver_rows(
    patcher: Patcher,
    run: GradientRun,
    layer: int | None,
    keys: list[tuple[str, str]],
    plan: SlicedReceivers | None,
    rows: slice,
) -> list[Tensor]:
    """dm/dx_v at ``rows`` for the receiver inputs ``keys`` of ``layer`` (None: the logits)."""
    if layer is None:
        return [run.final_grad[:, rows]]
    attention = attention_receivers(patcher.graph, keys)
    grads = iter(
        _attention_input_grads(patcher, run, layer, attention, plan, rows) if attention else []
    )
    return [
        _mlp_input_grad(patcher, run, layer, rows) if s == "in" else next(grads) for _, s in keys
    ]


def attention_receivers(graph: Graph, keys: list[tuple[str, str]]) -> list[Receiver]:
    return [(s, graph.node(r).index) for r, s in keys if s != "in"]


__all__ = [
    "GradientRun",
    "attention_receivers",
    "clean_gradient_run",
    "gradient_run",
    "receiver_rows",
]

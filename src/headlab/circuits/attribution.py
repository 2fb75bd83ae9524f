"""Edge attribution for every edge at once: EAP (Syed et al. 2023) and EAP-IG (Hanna et al.
2024, integrated gradients on the inputs).

An edge u -> v is scored by the first-order change of the metric when v's input carries u's
corrupted write instead of its clean one:

    score(u -> v) = sum over batch, pos of  (write_u(corrupted) - write_u(clean)) . dm / dx_v

x_v is the residual stream as v alone reads it (its own copy of the stream before its norm), so
dm/dx_v is the gradient through v only: through the norm, the projection, QK-norm and rotary to
v's q (a K/V group's k or v), through the norm to an MLP, or straight into the final norm for the
logits. The writes are the exact per-sender differences of path patching (patching.py); the
metric is a mean over the batch, so a score is in the metric's units, comparable with path
patching's effect of the same edge.

EAP takes the gradient on the clean input: one forward and one backward of the model, which
keeps the metric's gradient where each receiver reads: at the q, k, v projections' outputs
(receiver_grads.py takes each receiver's d_head columns back to the stream through its rows of
W and the norm's transpose, no backward; the generic path, one backward per receiver from its
site, where a layer's check refuses that), at each MLP's input (taken back to the stream
with the layer's heads held: through its norm, not the MLP) and at the final norm's input.
EAP-IG averages the gradient over
``steps`` inputs on the line from the corrupted to the clean input embeddings, as Hanna et al.'s
``get_scores_eap_ig`` does: alpha = k / steps, k = 0 .. steps - 1 (alpha = 0 is the corrupted
input; the clean one is not among them): ``steps`` times EAP's cost.

At any length the same code runs with bounded memory: the forward and backward go through the
kernel (SDPA's backward, or ``RecomputedAttention`` for what SDPA cannot serve: no (q_pos,
k_pos) weights kept); the maps from the stream to a receiver's input act on each position alone,
so the gradients dm/dx_v and the senders' writes are made a block of positions at a time (with
those positions' own position ids) and multiplied at once: neither every write nor every
receiver's gradient is held over the whole length.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.graph import LOGITS, Edge, Graph
from headlab.circuits.metrics import Metric
from headlab.circuits.patching import Patcher, Progress
from headlab.circuits.receiver_grads import (
    Receiver,
    SlicedReceivers,
    site_input_grads,
    sliced_receivers,
)
from headlab.circuits.resume import Stop, hooked
from headlab.models.hf.adapter import TransformersModel
from headlab.results.circuit_edges import EdgeScores

METHODS = ("eap", "eap-ig")


# Bytes of sender writes and receiver gradients held at once: the positions are taken a block
# of rows at a time, so that neither every sender's write nor every receiver's gradient is ever
# held over the whole length (at 8192 tokens on SmolLM2 each would be 6 to 9 GB).
ROWS_BUDGET = 256 * 2**20


@dataclass
class _Run:
    """One forward and backward: the stream entering each block, each layer's head outputs,
    and the metric's gradient where each receiver layer's inputs are read."""

    resid: list[Tensor]
    head_outputs: list[Tensor]
    site_grads: list[dict[str, Tensor]]  # per layer (generic path): q (batch, head, pos, d_head)
    output_grads: list[list[Tensor]]  # per layer (sliced path): per projection (batch, pos, out)
    mlp_grads: list[Tensor | None]  # per layer: (batch, pos, embed_dim) at the MLP's input
    final_grad: Tensor  # (batch, pos, embed_dim) at the last block's output


def _mlp_input(store: dict, key: tuple):
    """A pre-hook that hands the MLP a view of its input and keeps it: the gradient at the view
    is the gradient through the MLP alone (where attention reads the same tensor, GPT-J)."""

    def hook(_module, args, kwargs):
        if args:
            store[key] = args[0].view_as(args[0])
            return (store[key], *args[1:]), kwargs
        name = next(iter(kwargs))
        store[key] = kwargs[name].view_as(kwargs[name])
        return args, {**kwargs, name: store[key]}

    return hook


def _gradient_run(
    patcher: Patcher, hidden0: Tensor, clean: bool, plans: dict[int, SlicedReceivers | None],
    mlps: set[int],
) -> _Run:  # fmt: skip
    """The run from ``hidden0`` (the stream entering layer 0); ``clean``: it is the clean
    input, whose stream and head outputs the patcher holds already (not kept twice). plans:
    per layer with attention receivers, its sliced path (None: the generic one, from the
    sites); mlps: the layers whose MLP receives."""
    runner = patcher.runner
    n = len(runner.blocks)
    resid: list = [None] * n
    heads: list = [None] * n
    tensors: dict[tuple, Tensor] = {}

    def keep_site(layer, site):
        def fn(t: Tensor) -> None:
            tensors[(layer, site)] = t
            if site == "head_outputs" and not clean:
                heads[layer] = t.detach()

        return fn

    def hooks(stack: ExitStack) -> None:
        for block in runner.blocks:
            i = block.index
            if not clean:
                keep = lambda _m, a, i=i: resid.__setitem__(i, a[0].detach())  # noqa: E731
                stack.enter_context(hooked(block.module, "pre", keep))
                stack.enter_context(intervene(block.attention, "head_outputs",
                                              keep_site(i, "head_outputs")))  # fmt: skip
            plan = plans.get(i, False)
            if plan is None:
                for site in ("q", "k", "v"):
                    stack.enter_context(intervene(block.attention, site, keep_site(i, site)))
            elif plan:
                for j, module in enumerate(plan.modules):
                    stack.enter_context(hooked(module, "post", _keep_tensor(tensors, (i, j))))
            if i in mlps:
                handle = block.mlp.register_forward_pre_hook(
                    _mlp_input(tensors, (i, "mlp")), with_kwargs=True
                )
                stack.callback(handle.remove)
        stack.enter_context(hooked(runner.blocks[-1].module, "post",
                                   _keep_tensor(tensors, ("final",))))  # fmt: skip

    x = hidden0.detach().requires_grad_(True)
    with torch.enable_grad():
        value = patcher.metric(runner.forward(0, x, 1, hooks))[0]
        keys = [k for k in tensors if k[-1] != "head_outputs"]
        grads = torch.autograd.grad(value, [tensors[k] for k in keys], allow_unused=True)
    got = {
        k: torch.zeros_like(tensors[k]) if g is None else g
        for k, g in zip(keys, grads, strict=True)
    }
    tensors.clear()  # the graph's tensors go with it
    del grads, value
    site_grads = [{s: got[(i, s)] for s in ("q", "k", "v") if (i, s) in got} for i in range(n)]
    output_grads = [[got[(i, j)] for j in range(len(plans[i].modules))] if plans.get(i) else []
                    for i in range(n)]  # fmt: skip
    return _Run(
        resid=patcher.clean.resid[:n] if clean else resid,
        head_outputs=patcher.clean.head_outputs if clean else heads,
        site_grads=site_grads,
        output_grads=output_grads,
        mlp_grads=[got.get((i, "mlp")) for i in range(n)],
        final_grad=got[("final",)],
    )


def _keep_tensor(store: dict, key: tuple):
    def hook(_module, _args, output):
        store[key] = output if isinstance(output, Tensor) else output[0]

    return hook


def _attention_input_grads(
    patcher: Patcher, run: _Run, layer: int, receivers: list[Receiver],
    plan: SlicedReceivers | None, rows: slice,
) -> list[Tensor]:  # fmt: skip
    """dm/dx_v at the positions ``rows`` for each of ``receivers`` ((site, head or group) of
    ``layer``), each (batch, rows, embed_dim): the sliced path where ``plan`` is one, else the
    generic (receiver_grads.py)."""
    x = run.resid[layer][:, rows]
    if plan is not None:
        return list(plan.grads(x, [g[:, rows] for g in run.output_grads[layer]]))
    site_grads = {s: g[:, :, rows] for s, g in run.site_grads[layer].items()}
    return list(site_input_grads(patcher.runner, layer, x, rows, site_grads, receivers))


def _mlp_input_grad(patcher: Patcher, run: _Run, layer: int, rows: slice) -> Tensor:
    """dm/dx at ``rows`` through layer ``layer``'s MLP alone: the run's gradient at the MLP's
    input taken back to the stream entering the layer (its heads held at this run's outputs):
    the block runs up to the MLP's input, nothing of the MLP itself."""
    block = patcher.runner.blocks[layer]
    x = run.resid[layer][:, rows].clone().requires_grad_(True)
    frozen = run.head_outputs[layer][:, :, rows]

    def hooks(stack: ExitStack) -> None:
        stack.enter_context(intervene(block.attention, "head_outputs", lambda t: frozen))

        def stop(_module, args, kwargs):
            raise Stop(args[0] if args else next(iter(kwargs.values())))

        handle = block.mlp.register_forward_pre_hook(stop, with_kwargs=True)
        stack.callback(handle.remove)

    with torch.enable_grad():
        into = patcher.runner.forward(layer, x, 1, hooks, rows)
        (gx,) = torch.autograd.grad(into, x, grad_outputs=run.mlp_grads[layer][:, rows])
    return gx


def _receiver_rows(
    patcher: Patcher, run: _Run, layer: int | None, keys: list[tuple[str, str]],
    plan: SlicedReceivers | None, rows: slice,
) -> list[Tensor]:  # fmt: skip
    """dm/dx_v at ``rows`` for the receiver inputs ``keys`` of ``layer`` (None: the logits)."""
    if layer is None:
        return [run.final_grad[:, rows]]
    attention = _attention_receivers(patcher.graph, keys)
    grads = iter(_attention_input_grads(patcher, run, layer, attention, plan, rows)
                 if attention else [])  # fmt: skip
    return [_mlp_input_grad(patcher, run, layer, rows) if s == "in" else next(grads)
            for _, s in keys]  # fmt: skip


def _attention_receivers(graph: Graph, keys: list[tuple[str, str]]) -> list[Receiver]:
    return [(s, graph.node(r).index) for r, s in keys if s != "in"]


def _rows_step(patcher: Patcher, senders: int, receivers: int) -> int:
    """Positions per block: ``senders`` writes and ``receivers`` gradients (with the short
    map's activations, about 4 stream widths per copy) within ROWS_BUDGET."""
    b, pos, width = patcher.clean.resid[0].shape
    per_row = b * width * patcher.clean.resid[0].element_size() * (senders + 4 * receivers)
    return max(1, min(pos, ROWS_BUDGET // max(1, per_row)))


def attribution_scores(
    patcher: Patcher,
    edges: Sequence[Edge],
    alphas: Sequence[float],
    progress: Progress | None = None,
    rows: int | None = None,
) -> Tensor:
    """(len(edges),) float64: the mean over ``alphas`` of sum over batch, pos of
    (write_u(corrupted) - write_u(clean)) . dm/dx_v, the gradient taken on the input
    corrupted + alpha (clean - corrupted) of the embeddings. Per gradient run: one forward
    and backward of the model, then a block of positions at a time, each sender's write and
    each receiver's gradient at those positions, multiplied per receiver layer; ``rows``
    positions per block (default: as many as fit in ROWS_BUDGET)."""
    graph: Graph = patcher.graph
    order = {node.name: i for i, node in enumerate(graph.nodes)}  # the order they write
    senders = sorted(dict.fromkeys(e.sender for e in edges), key=order.__getitem__)
    row = {name: i for i, name in enumerate(senders)}
    by_layer: dict[int | None, list[int]] = {}
    for i, edge in enumerate(edges):
        layer = None if edge.receiver == LOGITS else graph.node(edge.receiver).layer
        by_layer.setdefault(layer, []).append(i)
    keys = {layer: list(dict.fromkeys((edges[i].receiver, edges[i].input) for i in indices))
            for layer, indices in by_layer.items()}  # fmt: skip
    # a receiver layer's senders all write before it: the first ``reach`` rows of the writes
    reach = {layer: 1 + max(row[edges[i].sender] for i in indices)
             for layer, indices in by_layer.items()}  # fmt: skip
    plans = {
        layer: sliced_receivers(patcher.runner, layer, _attention_receivers(graph, keys[layer]),
                                patcher.clean.resid[layer])
        for layer in by_layer
        if layer is not None and _attention_receivers(graph, keys[layer])
    }  # fmt: skip
    mlps = {layer for layer in by_layer if layer is not None
            and any(s == "in" for _, s in keys[layer])}  # fmt: skip
    widest = max(len(k) for k in keys.values())
    step = rows or _rows_step(patcher, len(senders), widest)
    clean0, corrupted0 = patcher.clean.resid[0], patcher.corrupted.resid[0]
    pos = clean0.shape[1]
    # per receiver layer: (sender, receiver input) sums over the runs and blocks of rows
    totals = {layer: torch.zeros(reach[layer], len(keys[layer]), dtype=torch.float64)
              for layer in by_layer}  # fmt: skip
    # progress: per gradient run, the run itself, then each (block of rows, receiver layer)
    blocks = -(-pos // step)
    total, done = len(alphas) * (1 + blocks * len(by_layer)), 0

    def advance() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    for alpha in alphas:
        hidden0 = clean0 if alpha == 1 else corrupted0 + alpha * (clean0 - corrupted0)
        run = _gradient_run(patcher, hidden0, alpha == 1, plans, mlps)
        advance()
        for start in range(0, pos, step):
            block_rows = slice(start, min(start + step, pos))
            writes = patcher.write_rows(senders, block_rows)
            flat = torch.stack([writes[s].reshape(-1) for s in senders])  # (sender, b*rows*e)
            del writes
            for layer in by_layer:
                grads = _receiver_rows(patcher, run, layer, keys[layer], plans.get(layer),
                                       block_rows)  # fmt: skip
                block = flat[: reach[layer]] @ torch.stack([g.reshape(-1) for g in grads]).t()
                totals[layer] += block.double()
                del grads, block
                advance()
        del run
    scores = torch.zeros(len(edges), dtype=torch.float64)
    for layer, indices in by_layer.items():
        column = {key: j for j, key in enumerate(keys[layer])}
        senders_at = torch.tensor([row[edges[i].sender] for i in indices])
        columns_at = torch.tensor([column[(edges[i].receiver, edges[i].input)] for i in indices])
        scores[indices] = totals[layer][senders_at, columns_at]
    return scores / len(alphas)


def edge_attribution(
    model: TransformersModel,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    *,
    method: str = "eap",
    steps: int = 5,
    edges: Sequence[str] | None = None,
    attention_mask: Tensor | None = None,
    patcher: Patcher | None = None,
    progress: Progress | None = None,
) -> EdgeScores:
    """EAP or EAP-IG scores of ``edges`` (default: every edge), see the module docstring.
    clean, corrupted: (batch, pos) int64 of one shape. ValueError for an unknown method or
    steps < 1 (before the model runs), and as ``Patcher``. ``progress(done, total)`` counts
    the gradient runs and, within each, the (block of positions, receiver layer) products."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "eap-ig" and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    patcher = patcher or Patcher(model, clean, corrupted, metric, attention_mask)
    graph = patcher.graph
    names = list(edges) if edges is not None else [e.name for e in graph.edges]
    parsed = [graph.edge(n) for n in names]
    # EAP-IG as Hanna et al.'s get_scores_eap_ig: k = 0 .. steps - 1 (corrupted in, clean out)
    alphas = [1.0] if method == "eap" else [k / steps for k in range(steps)]
    scores = attribution_scores(patcher, parsed, alphas, progress)
    return EdgeScores(
        method=method,
        metric=metric.kind,
        edges=names,
        scores=scores.tolist(),
        clean_metric=patcher.clean_value,
        corrupted_metric=patcher.corrupted_value,
    )


__all__ = ["METHODS", "attribution_scores", "edge_attribution"]

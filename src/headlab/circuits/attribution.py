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
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.circuits.gradient_run import (
    attention_receivers,
    clean_gradient_run,
    gradient_run,
    receiver_rows,
)
from headlab.circuits.graph import LOGITS, Edge, Graph
from headlab.circuits.metrics import Metric
from headlab.circuits.moved import Moved, moved_hooks, sender_node
from headlab.circuits.patching import Patcher, Progress
from headlab.circuits.receiver_grads import sliced_receivers
from headlab.circuits.resume import Cache, Runner
from headlab.models.run_protocol import RunnableModel
from headlab.results.circuit_edges import EdgeScores

METHODS = ("eap", "eap-ig", "eap-ig-activations", "eap-ig-senders")


# Bytes of sender writes and receiver gradients held at once: the positions are taken a block
# of rows at a time, so that neither every sender's write nor every receiver's gradient is ever
# held over the whole length (at 8192 tokens on SmolLM2 each would be 6 to 9 GB).
ROWS_BUDGET = 256 * 2**20
# Receiver layers whose gradients one product takes at once: a product of the writes with one
# layer's ~16 receivers reads every write for little arithmetic (memory-bound); 8 layers' at once
# are ~8x the arithmetic per read, while the senders are still cut to those before the last
# of them (measured on 2 cores at SmolLM2's sizes: 0.5 s per block of rows with all 30 layers
# in one product, 1.0-1.2 s with one product per layer).
LAYERS_PER_PRODUCT = 8


def _rows_step(patcher: Patcher, senders: int, receivers: int) -> int:
    """Positions per block: ``senders`` writes and ``receivers`` gradients (with the short
    map's activations, about 4 stream widths per copy) within ROWS_BUDGET."""
    b, pos, width = patcher.clean.resid[0].shape
    per_row = b * width * patcher.clean.resid[0].element_size() * (senders + 4 * receivers)
    return max(1, min(pos, ROWS_BUDGET // max(1, per_row)))


@dataclass
class _Layout:
    """Where each of the edges ``indices`` (into the edge list) goes in the products: one pass
    over the edges, made once per edge list (it is pure bookkeeping, 70,651 edges on SmolLM2)."""

    indices: list[int]
    senders: list[str]  # in the order they write
    by_layer: dict[int | None, list[int]]  # receiver layer (None: the logits) -> indices
    keys: dict[int | None, list[tuple[str, str]]]  # receiver layer -> (receiver, input)
    at_row: dict[int | None, list[int]]  # receiver layer -> each edge's sender row
    at_column: dict[int | None, list[int]]  # receiver layer -> each edge's (receiver, input)
    # a receiver layer's senders all write before it: the first ``reach`` of ``senders``
    reach: dict[int | None, int]


def _layout(graph: Graph, edges: Sequence[Edge], indices) -> _Layout:
    indices = list(indices)
    order = {node.name: i for i, node in enumerate(graph.nodes)}  # the order they write
    senders = sorted({edges[i].sender for i in indices}, key=order.__getitem__)
    row = {name: i for i, name in enumerate(senders)}
    layer_of: dict[str, int | None] = {}  # receiver -> its layer, looked up once per receiver
    by_layer: dict[int | None, list[int]] = {}
    keys: dict[int | None, list[tuple[str, str]]] = {}
    columns: dict[int | None, dict[tuple[str, str], int]] = {}
    at_row: dict[int | None, list[int]] = {}
    at_column: dict[int | None, list[int]] = {}
    for i in indices:
        edge = edges[i]
        receiver = edge.receiver
        layer = layer_of.get(receiver, -2)
        if layer == -2:
            layer = None if receiver == LOGITS else graph.node(receiver).layer
            layer_of[receiver] = layer
            if layer not in by_layer:
                by_layer[layer], keys[layer], columns[layer] = [], [], {}
                at_row[layer], at_column[layer] = [], []
        key = (receiver, edge.input)
        column = columns[layer].get(key)
        if column is None:
            column = columns[layer][key] = len(keys[layer])
            keys[layer].append(key)
        by_layer[layer].append(i)
        at_row[layer].append(row[edge.sender])
        at_column[layer].append(column)
    reach = {layer: 1 + max(found) for layer, found in at_row.items()}
    return _Layout(indices, senders, by_layer, keys, at_row, at_column, reach)


@dataclass
class _Group:
    """The edges that one node's runs score (``layout``), ``step`` positions per block of rows,
    and the receiver layers each product takes (``chunks``)."""

    node: Moved | None
    layout: _Layout
    step: int
    chunks: list[list[int | None]]


def _group(patcher: Patcher, node, layout: _Layout, rows) -> _Group:
    chunks = _chunks(list(layout.keys))
    widest = max(sum(len(layout.keys[layer]) for layer in chunk) for chunk in chunks)
    step = rows or _rows_step(patcher, len(layout.senders), widest)
    return _Group(node, layout, step, chunks)


def _chunks(layers: list[int | None]) -> list[list[int | None]]:
    """The receiver layers in order (the logits last), ``LAYERS_PER_PRODUCT`` at a time."""
    ordered = sorted(layers, key=lambda layer: float("inf") if layer is None else layer)
    return [ordered[i : i + LAYERS_PER_PRODUCT] for i in range(0, len(ordered), LAYERS_PER_PRODUCT)]


def _plans(runner: Runner, graph: Graph, keys: dict, known: dict) -> dict:
    """Per receiver layer in ``keys`` (layer -> (receiver, input)) with attention receivers,
    its sliced path or None (receiver_grads.py), each observed once (``known``: by layer and
    receivers)."""
    plans = {}
    for layer, found in keys.items():
        receivers = attention_receivers(graph, found)
        if layer is None or not receivers:
            continue
        key = (layer, tuple(receivers))
        if key not in known:
            known[key] = sliced_receivers(runner, layer, receivers)
        plans[layer] = known[key]
    return plans


def _clean_run(metric: Metric, names: Sequence[str] | None, prepared: dict):
    """``Patcher``'s clean_run for EAP: the gradient run on the clean input makes the clean
    Cache (one forward fewer); the run and its plans go to ``prepared``."""

    def run(runner: Runner, graph: Graph) -> Cache:
        edges = list(graph.edges) if names is None else [graph.edge(n) for n in names]
        layout = _layout(graph, edges, range(len(edges)))
        known: dict = {}
        plans = _plans(runner, graph, layout.keys, known)
        gradient, cache = clean_gradient_run(runner, metric, set(layout.keys), plans)
        prepared.update(run=gradient, known=known, edges=edges, layout=layout)
        return cache

    return run


def attribution_scores(
    patcher: Patcher,
    edges: Sequence[Edge],
    alphas: Sequence[float],
    progress: Progress | None = None,
    rows: int | None = None,
    moved: Sequence[Moved | None] = (None,),
    own: bool = False,
    prepared: dict | None = None,
) -> Tensor:
    """(len(edges),) float64: the mean over gradient runs of sum over batch, pos of
    (write_u(corrupted) - write_u(clean)) . dm/dx_v. One run per (``moved``, alpha): for
    None, the input corrupted + alpha (clean - corrupted) of the embeddings; for a ``Moved``,
    the clean input with that node's output moved there. ``own``: an edge takes only the
    runs that move its own sender's node (``sender_node``), else every run. Per gradient
    run: one forward and backward of the model (from the first layer that is interpolated or
    receives), then a block of positions at a time, each sender's write and each receiver's
    gradient at those positions, multiplied per receiver layer; ``rows`` positions per block
    (default: as many as fit in ROWS_BUDGET). prepared: the clean input's run already made
    (``_clean_run``), with its plans."""
    graph: Graph = patcher.graph
    everything = range(len(edges))
    prepared = dict(prepared or {})
    known: dict = prepared.pop("known", {})
    if own:
        mine = [sender_node(graph, e.sender) for e in edges]
        layouts = {
            node: _layout(graph, edges, [i for i in everything if mine[i] == node])
            for node in moved
            if node in mine
        }
        groups = [_group(patcher, node, layout, rows) for node, layout in layouts.items()]
    else:
        made = prepared.pop("layout", None)  # the clean run's, of the same edges
        layout = made if made is not None else _layout(graph, edges, everything)
        groups = [_group(patcher, node, layout, rows) for node in moved]
    clean0, corrupted0 = patcher.clean.resid[0], patcher.corrupted.resid[0]
    pos = clean0.shape[1]
    scores = torch.zeros(len(edges), dtype=torch.float64)
    # progress: per gradient run, the run itself, then each (block of rows, receiver layer)
    total = sum(len(alphas) * (1 + -(-pos // g.step) * len(g.layout.keys)) for g in groups)
    done = 0

    def advance() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    for group in groups:
        node, step, layout = group.node, group.step, group.layout
        # the layers before the first receiver's need no gradient: a run that changes nothing
        # before it starts there, from the clean stream
        first = min(len(patcher.runner.blocks) if k is None else k for k in layout.keys)
        plans = _plans(patcher.runner, graph, layout.keys, known)
        # per receiver layer: (sender, receiver input) sums over the runs and blocks of rows
        totals = {
            layer: torch.zeros(layout.reach[layer], len(keys), dtype=torch.float64)
            for layer, keys in layout.keys.items()
        }
        for alpha in alphas:
            if node is None and alpha != 1:
                hidden, start = corrupted0 + alpha * (clean0 - corrupted0), 0
            else:
                start = first if node is None else min(first, node.layer)
                hidden = patcher.clean.resid[start]
            if node is None and alpha == 1 and "run" in prepared:
                run = prepared.pop("run")
            else:
                run = gradient_run(
                    patcher,
                    hidden,
                    node is None and alpha == 1,
                    start,
                    moved_hooks(patcher, node, alpha),
                    set(layout.keys),
                    plans,
                )
            advance()
            for begin in range(0, pos, step):
                block_rows = slice(begin, min(begin + step, pos))
                writes = patcher.write_rows(layout.senders, block_rows)
                flat = torch.stack([writes[s].reshape(-1) for s in layout.senders])
                del writes  # flat: (sender, batch * rows * embed_dim)
                for chunk in group.chunks:
                    width = sum(len(layout.keys[layer]) for layer in chunk)
                    grads = flat.new_empty(width, flat.shape[1])  # (receiver, b * rows * e)
                    at = 0
                    for layer in chunk:
                        for g in receiver_rows(
                            patcher, run, layer, layout.keys[layer], plans.get(layer), block_rows
                        ):
                            grads[at].copy_(g.reshape(-1))
                            at += 1
                        advance()
                    reach = max(layout.reach[layer] for layer in chunk)
                    block = (flat[:reach] @ grads.t()).double()  # (sender, receiver)
                    at = 0
                    for layer in chunk:
                        count = len(layout.keys[layer])
                        totals[layer] += block[: layout.reach[layer], at : at + count]
                        at += count
                    del grads, block
            del run
        for layer, indices in layout.by_layer.items():
            at_row, at_column = layout.at_row[layer], layout.at_column[layer]
            scores[indices] += totals[layer][torch.tensor(at_row), torch.tensor(at_column)]
    return scores / (len(alphas) * (1 if own else len(moved)))


def activation_scores(
    patcher: Patcher,
    edges: Sequence[Edge],
    steps: int,
    hanna: bool,
    progress: Progress | None = None,
) -> Tensor:
    """EAP-IG on the activations, alpha = k / steps for k = 1 .. steps (the schedule of Hanna
    et al.'s ``get_scores_ig_activations``), one node moved at a time: the embeddings, each
    layer's attention (all its heads) and each MLP. ``hanna``: as they do, the moved output
    is cut from the gradient and every edge is averaged over every node's runs (not exact on
    a model whose other parts are linear: a run cuts the paths through its node); else each
    edge over the runs of its own sender's node, the gradient flowing through it (exact on
    such a model)."""
    nodes: list[Moved | None] = [None]
    for block in patcher.runner.blocks:
        nodes.append(Moved("attention", block.index, hanna))
        if block.has_mlp:
            nodes.append(Moved("mlp", block.index, hanna))
    alphas = [k / steps for k in range(1, steps + 1)]
    return attribution_scores(patcher, edges, alphas, progress, moved=nodes, own=not hanna)


def edge_attribution(
    model: RunnableModel,
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
    if method != "eap" and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    prepared: dict = {}
    if patcher is None and method == "eap" and metric.kind != "kl":  # KL needs the clean logits
        clean_run = _clean_run(metric, edges, prepared)
        patcher = Patcher(model, clean, corrupted, metric, attention_mask, clean_run)
    patcher = patcher or Patcher(model, clean, corrupted, metric, attention_mask)
    graph = patcher.graph
    if edges is None:  # every edge, as the graph holds them (no name read back)
        names, parsed = list(graph.edge_index), list(graph.edges)
    else:
        names = list(edges)
        parsed = prepared.pop("edges", None) or [graph.edge(n) for n in names]
    if method == "eap":
        scores = attribution_scores(patcher, parsed, [1.0], progress, prepared=prepared)
    elif method == "eap-ig":  # Hanna et al.'s get_scores_eap_ig: k = 0 .. steps - 1
        scores = attribution_scores(patcher, parsed, [k / steps for k in range(steps)], progress)
    else:
        scores = activation_scores(patcher, parsed, steps, method == "eap-ig-activations", progress)
    return EdgeScores(
        method=method,
        metric=metric.kind,
        edges=names,
        scores=scores.tolist(),
        clean_metric=patcher.clean_value,
        corrupted_metric=patcher.corrupted_value,
    )


__all__ = ["METHODS", "attribution_scores", "edge_attribution"]

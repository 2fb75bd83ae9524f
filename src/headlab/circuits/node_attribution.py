"""Node attribution: a score for every head, K/V group and MLP at the cost of one forward and one
backward (attribution patching, Nanda 2023; Syed et al. 2023's EAP at the nodes instead of the
edges).

A node n's score is the first-order change of the metric m when n's output a_n (node_sites.py:
a head's output before W_O, a K/V group's keys and values, an MLP's output) comes from the
corrupted run while everything else is clean:

    score(n) = sum over batch, pos, d of  (a_n(corrupted) - a_n(clean)) * dm/da_n (clean)

dm/da_n is the gradient at n's output itself, through everything after it (the later heads'
attention, norms, MLPs): one backward of the clean run gives every node's. The corrupted run
is one forward without autograd. Scores are in the metric's units, comparable with the exact
effect of patching the node (head_patching.py) and summing, per head, to nothing in particular
(the nodes are not independent). ``by_position`` keeps the sum over batch and d per position.

"nodes-ig" averages the gradient over ``steps`` inputs on the line from the corrupted to the
clean input embeddings (alpha = k / steps, k = 0 .. steps - 1, as EAP-IG on the inputs,
attribution.py): ``steps`` forwards and backwards, plus the clean run, closer to the exact
effect where the metric bends between the two inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from headlab.circuits.blocks import layer_shape
from headlab.circuits.graph import Graph, Node
from headlab.circuits.metrics import Metric
from headlab.circuits.node_sites import (
    NodeSites,
    SiteKey,
    keep_sites,
    needed_sites,
    unit_sites,
    unit_slice,
    units,
)
from headlab.circuits.patching import Progress, _check_pair
from headlab.circuits.resume import Runner
from headlab.limits import check_int
from headlab.models.run_protocol import RunnableModel
from headlab.results.node_scores import NodeScores

METHODS = ("nodes", "nodes-ig")


def site_run(
    runner: Runner, hidden: Tensor, keys: Sequence[SiteKey], metric: Metric, grad: bool
) -> tuple[dict[SiteKey, Tensor], Tensor, float, dict[SiteKey, Tensor] | None]:
    """One run from ``hidden`` (batch, pos, d_model), the stream entering block 0: the tensors
    at ``keys`` (detached), the metric's logits (batch, n_kept, vocab), its value and, with
    ``grad``, its gradient at each key (zeros where the metric does not depend on it). A KL
    metric without its reference takes this run's logits as the reference."""
    store: dict[SiteKey, Tensor] = {}
    x = hidden.detach().requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        logits = runner.forward(0, x, 1, keep_sites(runner.blocks, keys, store))
        if metric.kind == "kl" and metric.reference is None:
            metric = metric.with_reference(logits)
        value = metric(logits)[0]
        grads = None
        if grad:
            got = torch.autograd.grad(value, [store[k] for k in keys], allow_unused=True)
            grads = {
                k: torch.zeros_like(store[k]) if g is None else g.detach()
                for k, g in zip(keys, got, strict=True)
            }
    return {k: t.detach() for k, t in store.items()}, logits.detach(), float(value.detach()), grads


def _scores(nodes: Sequence[Node], sites: NodeSites, grads: dict[SiteKey, Tensor]) -> Tensor:
    """(node, pos) float64: sum over batch and d of the change times the gradient."""
    rows = []
    for node in nodes:
        row = 0
        for key in unit_sites(node):
            product = sites.delta(node, key).double() * unit_slice(node, grads[key]).double()
            row = row + product.sum(dim=(0, 2))  # (batch, pos, d) -> (pos,)
        rows.append(row)
    return torch.stack(rows)


def node_attribution(
    model: RunnableModel,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    *,
    method: str = "nodes",
    steps: int = 5,
    by_position: bool = False,
    attention_mask: Tensor | None = None,
    progress: Progress | None = None,
) -> NodeScores:
    """Every head's, K/V group's and MLP's score (module docstring). clean, corrupted: (batch,
    pos) int64 token ids of one shape; attention_mask: (batch, pos), 1 on real tokens (default
    all). ValueError for an unknown method, steps < 1, ids of unequal shapes, a metric of
    another batch or an answer outside the vocabulary, before the model runs.
    ``progress(done, total)`` counts the runs."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "nodes-ig":
        check_int("steps", steps, low=1, high=10_000)
    _check_pair(clean, corrupted, metric)
    metric.check_vocab(int(model.output_width))
    mask = torch.ones_like(clean) if attention_mask is None else attention_mask
    runner = Runner(model, clean, mask, metric.positions)
    shapes = [layer_shape(b) for b in runner.blocks]
    nodes = units(Graph.of(shapes))
    keys = needed_sites(nodes)
    clean_in = runner.stream_in()
    corrupted_in = Runner(model, corrupted, mask, metric.positions).stream_in()
    total = 2 if method == "nodes" else steps + 2
    done = 0

    def advance() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    # the clean run first: a KL metric takes its logits as the reference
    clean_sites, clean_logits, clean_value, grads = site_run(
        runner, clean_in, keys, metric, grad=method == "nodes"
    )
    advance()
    if metric.kind == "kl":
        metric = metric.with_reference(clean_logits)
    corrupted_sites, _, corrupted_value, _ = site_run(runner, corrupted_in, keys, metric, False)
    advance()
    if method == "nodes-ig":
        summed: dict[SiteKey, Tensor] = {}
        for k in range(steps):
            alpha = k / steps  # 0: the corrupted input; the clean one is not among them
            hidden = corrupted_in + alpha * (clean_in - corrupted_in)
            got = site_run(runner, hidden, keys, metric, grad=True)[3]
            for key, g in got.items():
                summed[key] = summed[key] + g if key in summed else g
            advance()
        grads = {key: g / steps for key, g in summed.items()}
    table = _scores(nodes, NodeSites(clean_sites, corrupted_sites), grads)  # (node, pos)
    return NodeScores(
        model=model.name,
        method=method,
        metric=metric.kind,
        nodes=[node.name for node in nodes],
        scores=table.sum(1).tolist(),
        clean_metric=clean_value,
        corrupted_metric=corrupted_value,
        heads_per_layer=[s.num_heads for s in shapes],
        kv_heads_per_layer=[s.num_kv_heads for s in shapes],
        by_position=table.tolist() if by_position else None,
        steps=steps if method == "nodes-ig" else None,
    )


__all__ = ["METHODS", "node_attribution", "site_run"]

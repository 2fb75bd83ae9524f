"""The patching sweep: every head, K/V group and MLP patched from the corrupted run into the clean
run, one exact run each (as TransformerLens' ``get_act_patch_attn_head_out_all_pos`` and
``..._by_pos`` and their MLP counterparts, in the noising direction: clean run, corrupted node).

For a node n (node_sites.py), its entry is metric(clean run with n's output from the corrupted
run) - metric(clean run): a head's output before W_O, a K/V group's keys and values (every query
head of the group reads them), an MLP's output. With ``by_position``, one entry per (node,
position): only that position's output is patched (for a K/V group: the key and value at that
position, which every later query reads), beside the entry of every position at once.

The runs are stacked on the batch axis (``chunk`` copies a run, one layer's nodes together), each
starting at the node's layer from the clean run's residual stream (resume.py), nothing before it
recomputed. The output is replaced at its site through ``intervene`` (no torch hooks); nothing is
linearised.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.attention.sites import BLOCK_SITES
from headlab.circuits.blocks import layer_shape
from headlab.circuits.graph import Graph, Node
from headlab.circuits.metrics import Metric
from headlab.circuits.node_attribution import site_run
from headlab.circuits.node_sites import SiteKey, needed_sites, unit_sites, units
from headlab.circuits.patching import Progress, _check_pair
from headlab.circuits.resume import Runner
from headlab.limits import check_int
from headlab.models.run_protocol import RunnableModel
from headlab.results.node_scores import NodeScores

#: One patched run: a node, and the position patched (None: every position).
Job = tuple[Node, int | None]
#: Bytes of stacked copies' activations a run may hold (as path patching's chunks).
CHUNK_BUDGET = 512 * 2**20


def default_chunk(resid: Tensor, budget_bytes: int = CHUNK_BUDGET) -> int:
    """Copies per run such that their activations stay near ``budget_bytes`` (about 16
    stream-wide tensors live at once per copy); resid: (batch, pos, d_model)."""
    b, pos, width = resid.shape
    return max(1, budget_bytes // (b * pos * width * 16 * resid.element_size()))


def _splices(jobs: Sequence[Job], batch: int, corrupted: dict[SiteKey, Tensor]):
    """Per site of the jobs' layer, a function that puts each copy's node (at its position)
    from the corrupted run into that copy's rows of the tensor."""
    by_site: dict[SiteKey, list[tuple[int, Node, int | None]]] = defaultdict(list)
    for copy, (node, pos) in enumerate(jobs):
        for key in unit_sites(node):
            by_site[key].append((copy, node, pos))

    def splice(key: SiteKey, entries):
        source = corrupted[key]

        def fn(t: Tensor) -> Tensor:
            out = t.clone()
            for copy, node, pos in entries:
                rows = slice(copy * batch, (copy + 1) * batch)
                at = slice(None) if pos is None else slice(pos, pos + 1)
                if node.kind == "mlp":  # (copies * batch, pos, d_model)
                    out[rows, at] = source[:, at]
                else:  # (copies * batch, head or kv_head, pos, d_head)
                    out[rows, node.index, at] = source[:, node.index, at]
            return out

        return fn

    return {key: splice(key, entries) for key, entries in by_site.items()}


def head_patching(
    model: RunnableModel,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    *,
    by_position: bool = False,
    attention_mask: Tensor | None = None,
    chunk: int | None = None,
    progress: Progress | None = None,
) -> NodeScores:
    """The sweep of the module docstring over every head, K/V group (GQA layers) and MLP.
    clean, corrupted: (batch, pos) int64 token ids of one shape; attention_mask: (batch, pos),
    1 on real tokens (default all); chunk: copies per run (default: as many as fit in
    ``CHUNK_BUDGET``). ValueError as ``node_attribution``, before the model runs.
    ``progress(done, total)`` counts the layers the patched runs have passed through (a run
    from layer l passes through L - l of the L layers), so that it moves with the work: the
    early layers' runs, done first, cost the most."""
    _check_pair(clean, corrupted, metric)
    metric.check_vocab(int(model.output_width))
    if chunk is not None:
        check_int("chunk", chunk, low=1)
    mask = torch.ones_like(clean) if attention_mask is None else attention_mask
    runner = Runner(model, clean, mask, metric.positions)
    shapes = [layer_shape(b) for b in runner.blocks]
    nodes = units(Graph.of(shapes))
    streams = [(block.index, "resid_in") for block in runner.blocks]
    keys = needed_sites(nodes) + streams
    with torch.no_grad():
        clean_sites, clean_logits, clean_value, _ = site_run(
            runner, runner.stream_in(), keys, metric, grad=False
        )
        if metric.kind == "kl":
            metric = metric.with_reference(clean_logits)
        corrupted_in = Runner(model, corrupted, mask, metric.positions).stream_in()
        corrupted_sites, _, corrupted_value, _ = site_run(
            runner, corrupted_in, needed_sites(nodes), metric, False
        )
    pos = clean.shape[1]
    # with by_position, every position alone and then every position at once (the score)
    places: list[int | None] = [None] + (list(range(pos)) if by_position else [])
    by_layer: dict[int, list[Job]] = defaultdict(list)
    for node in nodes:
        by_layer[node.layer] += [(node, p) for p in places]
    chunk = chunk or default_chunk(clean_sites[streams[0]])
    effects: dict[Job, float] = {}
    depth = len(runner.blocks)
    total = sum(len(jobs) * (depth - layer) for layer, jobs in by_layer.items())
    done, b = 0, runner.batch
    with torch.no_grad():
        for layer, jobs in sorted(by_layer.items()):
            block = runner.blocks[layer]
            for start in range(0, len(jobs), chunk):
                part = jobs[start : start + chunk]
                splices = _splices(part, b, corrupted_sites)

                def hooks(stack: ExitStack, splices=splices, block=block) -> None:
                    for (_, site), fn in splices.items():
                        target = block if site in BLOCK_SITES else block.attention
                        stack.enter_context(intervene(target, site, fn))

                hidden = clean_sites[(layer, "resid_in")].repeat(len(part), 1, 1)
                values = runner.measure(metric, layer, hidden, len(part), hooks)
                for job, value in zip(part, values.double().tolist(), strict=True):
                    effects[job] = value - clean_value
                done += len(part) * (depth - layer)
                if progress is not None:
                    progress(done, total)
    table = [[effects[(node, p)] for p in places[1:]] for node in nodes]
    return NodeScores(
        model=model.name,
        method="head-patching",
        metric=metric.kind,
        nodes=[node.name for node in nodes],
        scores=[effects[(node, None)] for node in nodes],
        clean_metric=clean_value,
        corrupted_metric=corrupted_value,
        heads_per_layer=[s.num_heads for s in shapes],
        kv_heads_per_layer=[s.num_kv_heads for s in shapes],
        by_position=table if by_position else None,
    )


__all__ = ["CHUNK_BUDGET", "default_chunk", "head_patching"]

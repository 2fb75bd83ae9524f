"""Exact path patching (Wang et al. 2022; Goldowsky-Dill et al. 2023) through the model's own
forward: the change in a metric when one edge carries its sender's value from the corrupted
input while everything else is clean.

For an edge u -> v (graph.py), v's input is the clean residual stream plus u's write on the
corrupted input minus its write on the clean one; the family's own norm, projection, QK-norm and
rotary make v's q (or its K/V group's k, v, or the MLP's output) from that input, while every
other head of the layer reads the clean stream; everything after v is recomputed. Nothing is
linearised:

- u's write (``Patcher.writes``) is what u adds to the stream leaving its block, with u's output
  (a head's output before W_O, an MLP's output, or the embeddings) from the corrupted run and
  the rest of the block clean: W_O's slice for a head in most families, and through the
  post-norms where the family has them (Gemma 2);
- v's patched input (phase A) is computed by running v's block from the clean stream plus u's
  write, stopped once the attention has its q, k, v (for an MLP: once the MLP has run, with the
  layer's heads held at their clean outputs);
- the metric (phase B) runs the model from v's layer on the clean stream, with v's slice of
  q / k / v (or the MLP's output) replaced by phase A's.

Edges are batched along the batch axis (``chunk`` edges per run, grouped by receiver layer) and
every run starts at the receiver's layer from the cached clean stream (resume.py). Every
intervention is one of the run protocol's sites (``models/run_protocol.py``): head outputs, q,
k and v of the attention, the MLP's output, and a run stopped at a site.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.blocks import layer_shape
from headlab.circuits.graph import EMBED, LOGITS, Edge, Graph
from headlab.circuits.metrics import Metric
from headlab.circuits.resume import Cache, Runner
from headlab.models.run_protocol import RunnableModel, StopAt
from headlab.results.circuit_edges import EdgeScores

Progress = Callable[[int, int], None]
# Positions on which ``writes_are_linear`` compares the block's writes with the formulas.
LINEARITY_ROWS = 16


def _check_pair(clean: Tensor, corrupted: Tensor, metric: Metric) -> None:
    if clean.dim() != 2 or clean.shape != corrupted.shape:
        raise ValueError(
            "clean and corrupted ids must be (batch, pos) of one shape, got "
            f"{tuple(clean.shape)} and {tuple(corrupted.shape)}"
        )
    if metric.batch != clean.shape[0]:
        raise ValueError(f"the metric is for {metric.batch} texts, the batch has {clean.shape[0]}")
    if int(metric.positions.max()) >= clean.shape[1]:
        raise ValueError(
            f"the metric reads position {int(metric.positions.max())}, the texts have "
            f"{clean.shape[1]} tokens"
        )


class Patcher:
    """Clean and corrupted runs of ``model`` kept once, then any edges patched against them.

    clean, corrupted: (batch, pos) int64 token ids of equal shape; attention_mask: (batch, pos),
    1 on real tokens (default: all); metric: metrics.py. ValueError for unequal shapes, a metric
    of another batch or an answer outside the vocabulary. clean_run(runner, graph): the clean
    run's Cache where the caller's own run of the clean input keeps it (edge attribution's
    gradient run: one forward fewer); default ``Runner.cache``.
    """

    def __init__(
        self,
        model: RunnableModel,
        clean: Tensor,
        corrupted: Tensor,
        metric: Metric,
        attention_mask: Tensor | None = None,
        clean_run: Callable[[Runner, Graph], Cache] | None = None,
    ) -> None:
        _check_pair(clean, corrupted, metric)
        metric.check_vocab(int(model.output_width))
        mask = torch.ones_like(clean) if attention_mask is None else attention_mask
        self.runner = Runner(model, clean, mask, metric.positions)
        self.graph = Graph.of([layer_shape(b) for b in self.runner.blocks])
        self.clean = clean_run(self.runner, self.graph) if clean_run else self.runner.cache(clean)
        self.corrupted = self.runner.cache(corrupted)
        self.metric = metric.with_reference(self.clean.logits) if metric.kind == "kl" else metric
        self.clean_value = float(self.metric(self.clean.logits)[0])
        self.corrupted_value = float(self.metric(self.corrupted.logits)[0])
        self._writes: dict[str, Tensor] = {}
        self._linear: bool | None = None
        self.scale = 1.0

    @property
    def batch(self) -> int:
        return self.runner.batch

    # ------------------------------------------------------------------ senders
    def writes(self, senders: Sequence[str]) -> dict[str, Tensor]:
        """Each sender's corrupted write minus its clean write, (batch, pos, embed_dim)."""
        missing = [s for s in dict.fromkeys(senders) if s not in self._writes]
        by_layer: dict[int, list[str]] = defaultdict(list)
        for name in missing:
            node = self.graph.node(name)
            if node.kind == "embed":
                self._writes[EMBED] = self.corrupted.resid[0] - self.clean.resid[0]
            elif node.kind in ("head", "mlp"):
                by_layer[node.layer].append(name)
            else:
                raise ValueError(f"{name!r} writes nothing into the residual stream")
        with torch.no_grad():
            linear = bool(by_layer) and self.writes_are_linear()
            for layer, names in by_layer.items():
                if linear:
                    self._writes.update({n: self._direct_write(n) for n in names})
                else:
                    self._writes.update(self._layer_writes(layer, names))
        return {s: self._writes[s] for s in senders}

    def write_rows(self, senders: Sequence[str], rows: slice) -> dict[str, Tensor]:
        """``writes`` at the positions ``rows`` alone, (batch, rows, embed_dim), computed for
        those rows where the writes are linear (nothing of the whole length kept)."""
        if not self.writes_are_linear():
            return {s: w[:, rows] for s, w in self.writes(senders).items()}
        with torch.no_grad():
            return {s: self._direct_write(s, rows) for s in senders}

    def writes_are_linear(self) -> bool:
        """Whether a head's write is its output through its own W_O slice and an MLP's its
        output (nothing between them and the residual add), observed once on layer 0: every
        head's and the MLP's write, run through the block, against those formulas. Where
        they agree, writes take the formulas (no block runs)."""
        if self._linear is None:
            block = self.runner.blocks[0]
            names = [f"0.{h}" for h in range(block.attention.num_heads)]
            names += ["mlp.0"] if block.has_mlp else []
            rows = slice(0, min(LINEARITY_ROWS, self.clean.resid[0].shape[1]))
            with torch.no_grad():  # a write at a position depends on that position alone
                exact = self._layer_writes(0, names, rows)
                self._linear = block.attention.output_weight() is not None and all(
                    _close(exact[n], self._direct_write(n, rows)) for n in names
                )
        return self._linear

    def _direct_write(self, name: str, rows: slice = slice(None)) -> Tensor:
        """The write formula of ``writes_are_linear``, corrupted minus clean, at ``rows``."""
        node = self.graph.node(name)
        if node.kind == "embed":
            return self.corrupted.resid[0][:, rows] - self.clean.resid[0][:, rows]
        if node.kind == "mlp":
            return self.corrupted.mlp[node.layer][:, rows] - self.clean.mlp[node.layer][:, rows]
        attention = self.runner.blocks[node.layer].attention
        d = attention.head_dim
        w_o = attention.output_weight().detach()[:, node.index * d : (node.index + 1) * d]
        h = node.index
        change = self.corrupted.head_outputs[node.layer][:, h, rows]
        change = change - self.clean.head_outputs[node.layer][:, h, rows]
        return change @ w_o.t()  # (batch, rows, d_head) -> (batch, rows, embed_dim)

    def _layer_writes(
        self, layer: int, names: list[str], rows: slice | None = None
    ) -> dict[str, Tensor]:
        """Block ``layer`` run once per sender (plus one clean copy), each copy with one sender
        corrupted and the rest of the block clean; the writes are the differences (at the
        positions ``rows`` alone, default all)."""
        b, copies = self.batch, len(names) + 1
        block = self.runner.blocks[layer]
        nodes = [self.graph.node(n) for n in names]
        at = slice(None) if rows is None else rows
        corrupted_heads = self.corrupted.head_outputs[layer][:, :, at]

        def heads(t: Tensor) -> Tensor:  # (copies * batch, head, pos, d_head)
            out = t.clone()
            for c, node in enumerate(nodes):
                if node.kind == "head":
                    out[c * b : (c + 1) * b, node.index] = corrupted_heads[:, node.index]
            return out

        def mlp(_t: Tensor) -> Tensor:
            value = self.clean.mlp[layer][:, at].repeat(copies, 1, 1)
            for c, node in enumerate(nodes):
                if node.kind == "mlp":
                    value[c * b : (c + 1) * b] = self.corrupted.mlp[layer][:, at]
            return value

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(intervene(block.attention, "head_outputs", heads))
            if block.has_mlp:
                stack.enter_context(intervene(block, "mlp_out", mlp))

        hidden = self.clean.resid[layer][:, at].repeat(copies, 1, 1)
        out = self.runner.forward(layer, hidden, copies, hooks, rows, StopAt(layer, "resid_out"))
        base = out[(copies - 1) * b :]
        return {n: out[c * b : (c + 1) * b] - base for c, n in enumerate(names)}

    # ------------------------------------------------------------------ receivers
    def _shifted(self, base: Tensor, edges: list[Edge]) -> Tensor:
        """``base`` (batch, pos, embed_dim) once per edge plus the edge's write (times
        ``self.scale``): (len(edges) * batch, pos, embed_dim)."""
        writes = self.writes([e.sender for e in edges])
        return base.repeat(len(edges), 1, 1) + self.scale * torch.cat(
            [writes[e.sender] for e in edges]
        )

    def _patched_inputs(self, layer: int, edges: list[Edge], kind: str) -> object:
        """Phase A: the receivers' inputs of layer ``layer`` from the clean stream plus each
        edge's write, one copy per edge: {"q","k","v"} -> (copies * batch, head, pos, d_head)
        for attention receivers, the MLP's output (copies * batch, pos, embed_dim) for MLPs."""
        block = self.runner.blocks[layer]
        copies = len(edges)
        hidden = self._shifted(self.clean.resid[layer], edges)
        if kind == "attention":
            return self.runner.values(layer, hidden, copies)
        frozen = self.clean.head_outputs[layer].repeat(copies, 1, 1, 1)

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(intervene(block.attention, "head_outputs", lambda t: frozen))

        return self.runner.forward(layer, hidden, copies, hooks, stop=StopAt(layer, "mlp_out"))

    def _receiver_index(self, edge: Edge) -> int:
        node = self.graph.node(edge.receiver)
        return node.index

    def _run_chunk(self, layer: int, edges: list[Edge], kind: str) -> Tensor:
        """The metric of each edge's patched run, (len(edges),)."""
        b, copies = self.batch, len(edges)
        n = len(self.runner.blocks)
        if kind == "logits":
            hidden = self._shifted(self.clean.resid[n], edges)
            return self.runner.measure(self.metric, n, hidden, copies)
        patched = self._patched_inputs(layer, edges, kind)
        block = self.runner.blocks[layer]

        def splice(site):
            def fn(t: Tensor) -> Tensor:
                out = t.clone()
                for c, edge in enumerate(edges):
                    if edge.input == site:
                        rows, h = slice(c * b, (c + 1) * b), self._receiver_index(edge)
                        out[rows, h] = patched[site][rows, h]
                return out

            return fn

        def hooks(stack: ExitStack) -> None:
            if kind == "attention":
                for site in sorted({e.input for e in edges}):
                    stack.enter_context(intervene(block.attention, site, splice(site)))
            else:
                stack.enter_context(intervene(block, "mlp_out", lambda t: patched))

        hidden = self.clean.resid[layer].repeat(copies, 1, 1)
        return self.runner.measure(self.metric, layer, hidden, copies, hooks)

    def effects(
        self,
        edges: Sequence[str],
        chunk: int | None = None,
        progress: Progress | None = None,
        scale: float = 1.0,
    ) -> Tensor:
        """(len(edges),) float64: metric(edge patched) - metric(clean), each edge alone.
        ``scale`` multiplies each sender's write (1: path patching; a small one gives the
        derivative that edge attribution estimates, by finite differences)."""
        self.scale = scale
        parsed = [self.graph.edge(name) for name in edges]
        chunk = chunk or self.default_chunk()
        groups: dict[tuple[int, str], list[int]] = defaultdict(list)
        for i, edge in enumerate(parsed):
            node = self.graph.node(edge.receiver)
            kind = (
                "logits"
                if edge.receiver == LOGITS
                else ("mlp" if node.kind == "mlp" else "attention")
            )
            groups[(node.layer, kind)].append(i)
        out = torch.zeros(len(parsed), dtype=torch.float64)
        done = 0
        with torch.no_grad():
            for (layer, kind), indices in sorted(groups.items()):
                for start in range(0, len(indices), chunk):
                    part = indices[start : start + chunk]
                    values = self._run_chunk(layer, [parsed[i] for i in part], kind)
                    out[part] = values.double() - self.clean_value
                    done += len(part)
                    if progress is not None:
                        progress(done, len(parsed))
        return out

    def default_chunk(self, budget_bytes: int = 512 * 2**20) -> int:
        """Edges per run such that the copies' activations stay near ``budget_bytes``
        (float32; about 16 stream-wide tensors live at once). The logits do not count: the
        metric is computed a few copies at a time (``Runner.measure``)."""
        resid = self.clean.resid[0]
        b, pos, width = resid.shape
        per_copy = b * pos * width * 16
        return max(1, budget_bytes // (per_copy * resid.element_size()))


def _close(want: Tensor, got: Tensor) -> bool:
    return float((want - got).abs().max()) <= 1e-3 * (float(want.abs().max()) + 1e-12)


def path_patching(
    model: RunnableModel,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    edges: Sequence[str] | None = None,
    *,
    attention_mask: Tensor | None = None,
    chunk: int | None = None,
    progress: Progress | None = None,
) -> EdgeScores:
    """Exact path patching of ``edges`` (default: every edge of the model's graph), each alone
    (see the module docstring): the change in ``metric`` when the edge carries its corrupted
    value."""
    patcher = Patcher(model, clean, corrupted, metric, attention_mask)
    names = list(edges) if edges is not None else [e.name for e in patcher.graph.edges]
    scores = patcher.effects(names, chunk=chunk, progress=progress)
    return EdgeScores(
        method="path-patching",
        metric=metric.kind,
        edges=names,
        scores=scores.tolist(),
        clean_metric=patcher.clean_value,
        corrupted_metric=patcher.corrupted_value,
    )


__all__ = ["Patcher", "path_patching"]

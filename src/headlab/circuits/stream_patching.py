"""Exact path patching across an encoder-decoder's two streams (stream_graph.py), through the run
protocol (``models/run_protocol.py``; the transformers route in ``models/hf/seq2seq_run.py``),
and along the one stream of an image encoder (``models/hf/vision_run.py``: the same graph without
the decoder and the cross-attention).

As in a decoder (patching.py), an edge u -> v carries u's write on the corrupted input into v's
input while everything else is clean, and nothing is linearised:

- u's write is what u adds to the stream leaving its block, u's output (a head's output before
  W_O, an MLP's output, the embeddings) from the corrupted run and the rest of its block (its
  other heads, its cross-attention, its MLP) held at the clean run's: a block run, so that a
  post-norm family (BART, Marian: the norm after each residual add) is served as a pre-norm one;
- v's patched input is the run of v's block from the clean stream plus u's write, the parts of
  the block before v held clean (an MLP reads its block's self- and cross-attention at their
  clean outputs; a cross-attention head's query, its block's self-attention), stopped at v's
  input: its q, k, v or the MLP's output. An encoder sender into a cross-attention head's key or
  value: the stream leaving the encoder's last block plus u's write, through the encoder's own
  final norm (recomputed, not held), into the cross-attention's key and value projections;
- the metric runs the model from v's block on the clean input, v's slice of its input replaced.

Every run starts at the receiver's block from the clean run's stream and stacks ``chunk`` edges
on the batch axis.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.graph import Edge
from headlab.circuits.metrics import Metric
from headlab.circuits.stream_graph import StreamGraph, stream_graph_of
from headlab.models.run_protocol import StopAt, cache
from headlab.results.circuit_edges import EdgeScores

Progress = Callable[[int, int], None]
Hooks = Callable[[ExitStack], None]


def _check_pair(clean, corrupted, metric: Metric) -> None:
    if not isinstance(clean, Mapping):  # an image encoder's pixel values
        if clean.shape != corrupted.shape:
            raise ValueError(
                f"clean and corrupted images must be of one shape, got {tuple(clean.shape)} "
                f"and {tuple(corrupted.shape)}"
            )
        if metric.batch != clean.shape[0]:
            raise ValueError(
                f"the metric is for {metric.batch} images, the batch has {clean.shape[0]}"
            )
        return
    for stream in ("encoder", "decoder"):
        a = clean[stream].mask if stream == "encoder" else clean[stream].input_ids
        b = corrupted[stream].mask if stream == "encoder" else corrupted[stream].input_ids
        if a.shape != b.shape:
            raise ValueError(
                f"clean and corrupted {stream} inputs must be of one shape, got "
                f"{tuple(a.shape)} and {tuple(b.shape)}"
            )
    target = clean["decoder"].input_ids
    if metric.batch != target.shape[0]:
        raise ValueError(f"the metric is for {metric.batch} texts, the batch has {target.shape[0]}")
    if int(metric.positions.max()) >= target.shape[1]:
        raise ValueError(
            f"the metric reads target position {int(metric.positions.max())}, the "
            f"targets have {target.shape[1]} tokens"
        )


def held_copies(t: Tensor, value: Tensor) -> Tensor:
    """``value`` (batch, ...) for every copy of ``t`` (copies * batch, ...)."""
    return value.repeat(t.shape[0] // value.shape[0], *([1] * (value.dim() - 1)))


class StreamPatcher:
    """Clean and corrupted runs of an encoder-decoder (or of an image encoder) kept once, then
    edges patched against them. clean, corrupted: ``{"encoder": SourceBatch, "decoder":
    TokenBatch}`` of equal shapes (an image encoder: pixel values (batch, channel, height,
    width)); metric: on the decoder's next-token logits (metrics.py; an image encoder: on its
    readout, one row per image, ``vision_run.py``). ValueError for unequal shapes or a metric of
    another batch, before any run."""

    def __init__(self, model, clean, corrupted, metric: Metric) -> None:
        _check_pair(clean, corrupted, metric)
        metric.check_vocab(int(model.output_width))
        self.model, self.input = model, clean
        self.graph: StreamGraph = stream_graph_of(model)
        self.blocks = list(model.blocks())
        #: each stream's first block
        self.starts = {b.stream: b.index for b in reversed(self.blocks)}
        self.first_decoder = self.starts.get("decoder")  # None: one stream
        # the final states the runs keep: the metric's positions of the decoder; every position
        # of an image (its readout reads them all)
        self.positions = None if self.first_decoder is None else metric.positions
        with torch.no_grad():
            self.clean = cache(model, clean, self.positions)
            self.corrupted = cache(model, corrupted, self.positions)
            clean_logits = model.unembed(self.clean.final)
            corrupted_logits = model.unembed(self.corrupted.final)
        self.metric = metric.with_reference(clean_logits) if metric.kind == "kl" else metric
        self.clean_value = float(self.metric(clean_logits)[0])
        self.corrupted_value = float(self.metric(corrupted_logits)[0])
        self._writes: dict[str, Tensor] = {}

    @property
    def batch(self) -> int:
        return self.clean.resid[0].shape[0]

    def encoder_out(self, run) -> Tensor:
        """The stream leaving the encoder's last block (batch, source pos, d_model)."""
        return run.streams_out["encoder"]

    # ------------------------------------------------------------------ runs
    def run(
        self,
        start: int,
        hidden: Tensor,
        copies: int,
        hooks: Hooks | None = None,
        stop: StopAt | None = None,
        sources: Tensor | None = None,
    ) -> Tensor:
        """The model's run from block ``start`` with ``hidden`` (the stream entering it), the
        clean input's encoder states unless ``sources`` ((copies * batch, source pos,
        d_model)); the final states at the metric's positions, or the tensor at ``stop``."""
        given = None
        if self.first_decoder is not None and start >= self.first_decoder:
            given = {"encoder": sources if sources is not None else self.encoder_out(self.clean)}
        return self.model.run_blocks(
            self.input,
            start=start,
            hidden=hidden,
            copies=copies,
            stop=stop,
            keep=None if stop else self.positions,
            interventions=hooks,
            sources=given,
        )

    def measure(
        self,
        start: int,
        hidden: Tensor,
        copies: int,
        hooks: Hooks | None = None,
        sources: Tensor | None = None,
    ) -> Tensor:
        """(copies,) the metric of each copy of ``run``'s final states."""
        states = self.run(start, hidden, copies, hooks, sources=sources)
        return self.metric(self.model.unembed(states))

    def held_block(self, layer: int, values: Callable[[str, Tensor], Tensor]) -> Hooks:
        """Interventions that set block ``layer``'s head outputs and MLP output to
        ``values(part, t)`` (part: "self", "cross", "mlp")."""
        block = self.blocks[layer]

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(
                intervene(block.attention, "head_outputs", lambda t: values("self", t))
            )
            if block.cross_attention is not None:
                stack.enter_context(
                    intervene(block.cross_attention, "head_outputs", lambda t: values("cross", t))
                )
            stack.enter_context(intervene(block, "mlp_out", lambda t: values("mlp", t)))

        return hooks

    def held_before(self, layer: int, kind: str) -> Hooks:
        """Interventions holding what block ``layer`` computes before a receiver of ``kind``
        at the clean run's outputs: the self-attention before a cross-attention head's query,
        both attentions before the MLP."""
        block = self.blocks[layer]
        clean = {"self": self.clean.head_outputs[layer], "cross": self.clean.cross_outputs[layer]}

        def hold(part: str):
            return lambda t: held_copies(t, clean[part])

        def hooks(stack: ExitStack) -> None:
            if kind in ("cross_q", "mlp"):
                stack.enter_context(intervene(block.attention, "head_outputs", hold("self")))
            if kind == "mlp" and block.cross_attention is not None:
                stack.enter_context(intervene(block.cross_attention, "head_outputs", hold("cross")))

        return hooks

    # ------------------------------------------------------------------ senders
    def writes(self, senders: Sequence[str]) -> dict[str, Tensor]:
        """Each sender's corrupted write minus its clean write, (batch, pos, d_model) on its
        own stream's positions."""
        by_layer: dict[int, list[str]] = defaultdict(list)
        for name in dict.fromkeys(senders):
            if name in self._writes:
                continue
            node = self.graph.node(name)
            if node.kind == "embed":
                at = self.starts[node.stream]
                self._writes[name] = self.corrupted.resid[at] - self.clean.resid[at]
            elif node.kind == "logits":
                raise ValueError(f"{name!r} writes nothing into the residual stream")
            else:
                by_layer[node.layer].append(name)
        with torch.no_grad():
            for layer, names in by_layer.items():
                self._writes.update(self._layer_writes(layer, names))
        return {s: self._writes[s] for s in senders}

    def _layer_writes(self, layer: int, names: list[str]) -> dict[str, Tensor]:
        """Block ``layer`` once per sender plus a clean copy (the last), each with its sender's
        output corrupted and the rest of the block held clean."""
        b, copies = self.batch, len(names) + 1
        nodes = [self.graph.node(n) for n in names]
        clean = {
            "self": self.clean.head_outputs[layer],
            "cross": self.clean.cross_outputs[layer],
            "mlp": self.clean.mlp[layer],
        }
        bad = {
            "self": self.corrupted.head_outputs[layer],
            "cross": self.corrupted.cross_outputs[layer],
            "mlp": self.corrupted.mlp[layer],
        }
        part = {"head": "self", "cross": "cross", "mlp": "mlp"}

        def values(which: str, t: Tensor) -> Tensor:
            out = held_copies(t, clean[which]).clone()
            for c, node in enumerate(nodes):
                if part[node.kind] != which:
                    continue
                rows = slice(c * b, (c + 1) * b)
                if which == "mlp":
                    out[rows] = bad["mlp"]
                else:
                    out[rows, node.index] = bad[which][:, node.index]
            return out

        hidden = self.clean.resid[layer].repeat(copies, 1, 1)
        out = self.run(
            layer,
            hidden,
            copies,
            self.held_block(layer, values),
            StopAt(layer, "resid_out"),
            self.sources_for(layer, copies),
        )
        base = out[(copies - 1) * b :]
        return {n: out[c * b : (c + 1) * b] - base for c, n in enumerate(names)}

    def sources_for(self, layer: int, copies: int) -> Tensor | None:
        if self.first_decoder is None or layer < self.first_decoder:
            return None
        return self.encoder_out(self.clean).repeat(copies, 1, 1)

    # ------------------------------------------------------------------ receivers
    def kind(self, edge: Edge) -> tuple[int, str]:
        """(the receiver's block, its kind: "self", "cross_q", "cross_kv", "mlp", "logits")."""
        node = self.graph.node(edge.receiver)
        if node.kind == "logits":
            return len(self.blocks), "logits"
        if node.kind == "mlp":
            return node.layer, "mlp"
        if node.kind == "cross":
            return node.layer, "cross_q" if edge.input == "q" else "cross_kv"
        return node.layer, "self"

    def _shifted(self, base: Tensor, edges: list[Edge], scale: float) -> Tensor:
        writes = self.writes([e.sender for e in edges])
        return base.repeat(len(edges), 1, 1) + scale * torch.cat([writes[e.sender] for e in edges])

    def _patched_inputs(self, layer: int, edges: list[Edge], kind: str, scale: float):
        """Each edge's copy of the receiver's input from the clean stream plus the edge's write:
        {"q", "k", "v"} -> (copies * batch, head, pos, d_head), or the MLP's output."""
        copies = len(edges)
        block = self.blocks[layer]
        seen: dict[str, Tensor] = {}
        hidden = self.clean.resid[layer].repeat(copies, 1, 1)
        sources = self.sources_for(layer, copies)
        if kind == "cross_kv":
            sources = self._shifted(self.encoder_out(self.clean), edges, scale)
        else:
            hidden = self._shifted(self.clean.resid[layer], edges, scale)
        attention = block.attention if kind == "self" else block.cross_attention

        def hooks(stack: ExitStack) -> None:
            self.held_before(layer, kind)(stack)  # what the block computes before v, clean
            if kind != "mlp":
                for site in ("q", "k"):
                    keep = lambda t, s=site: seen.__setitem__(s, t)  # noqa: E731
                    stack.enter_context(intervene(attention, site, keep))

        if kind == "mlp":
            return self.run(layer, hidden, copies, hooks, StopAt(layer, "mlp_out"), sources)
        cross = kind != "self"
        seen["v"] = self.run(layer, hidden, copies, hooks, StopAt(layer, "v", cross), sources)
        return seen

    def _run_chunk(self, layer: int, edges: list[Edge], kind: str, scale: float) -> Tensor:
        """The metric of each edge's patched run, (len(edges),)."""
        b, copies = self.batch, len(edges)
        if kind == "logits":
            hidden = self._shifted(self.clean.resid[layer], edges, scale)
            return self.measure(layer, hidden, copies, sources=self.sources_for(layer, copies))
        patched = self._patched_inputs(layer, edges, kind, scale)
        block = self.blocks[layer]
        attention = block.attention if kind == "self" else block.cross_attention

        def splice(site: str):
            def fn(t: Tensor) -> Tensor:
                out = t.clone()
                for c, edge in enumerate(edges):
                    if edge.input == site:
                        rows, h = slice(c * b, (c + 1) * b), self.graph.node(edge.receiver).index
                        out[rows, h] = patched[site][rows, h]
                return out

            return fn

        def hooks(stack: ExitStack) -> None:
            if kind == "mlp":
                stack.enter_context(intervene(block, "mlp_out", lambda t: patched))
                return
            for site in sorted({e.input for e in edges}):
                stack.enter_context(intervene(attention, site, splice(site)))

        hidden = self.clean.resid[layer].repeat(copies, 1, 1)
        return self.measure(layer, hidden, copies, hooks, self.sources_for(layer, copies))

    def effects(
        self,
        edges: Sequence[str],
        chunk: int = 16,
        progress: Progress | None = None,
        scale: float = 1.0,
    ) -> Tensor:
        """(len(edges),) float64: metric(edge patched) - metric(clean), each edge alone;
        ``scale`` multiplies each write (1: path patching)."""
        parsed = [self.graph.edge(name) for name in edges]
        groups: dict[tuple[int, str], list[int]] = defaultdict(list)
        for i, edge in enumerate(parsed):
            groups[self.kind(edge)].append(i)
        out = torch.zeros(len(parsed), dtype=torch.float64)
        done = 0
        with torch.no_grad():
            for (layer, kind), indices in sorted(groups.items()):
                for start in range(0, len(indices), chunk):
                    part = indices[start : start + chunk]
                    values = self._run_chunk(layer, [parsed[i] for i in part], kind, scale)
                    out[part] = values.double() - self.clean_value
                    done += len(part)
                    if progress is not None:
                        progress(done, len(parsed))
        return out


def stream_path_patching(
    model,
    clean: Mapping,
    corrupted: Mapping,
    metric: Metric,
    edges: Sequence[str] | None = None,
    *,
    chunk: int = 16,
    progress: Progress | None = None,
) -> EdgeScores:
    """Exact path patching of ``edges`` (default: every edge of the two streams' graph), each
    alone (module docstring)."""
    patcher = StreamPatcher(model, clean, corrupted, metric)
    names = list(edges) if edges is not None else [e.name for e in patcher.graph.edges]
    scores = patcher.effects(names, chunk=chunk, progress=progress)
    return EdgeScores(
        "path-patching",
        metric.kind,
        names,
        scores.tolist(),
        patcher.clean_value,
        patcher.corrupted_value,
    )


__all__ = ["StreamPatcher", "held_copies", "stream_path_patching"]

"""Patching a set of edges at once (a circuit's complement): the metric when the edges of a set
carry their senders' corrupted values and every other edge carries the value of the run itself
(EAP-IG's and MIB's evaluation; with one edge in the set it is path patching, patching.py).

For receiver v, with write_u(run) u's write in this run and write_u(corrupted) in the corrupted
run:

    x_v = x_v(run) + sum over patched edges u -> v of (write_u(corrupted) - write_u(run))

where x_v(run) is the stream v reads in this run (the sum of every earlier write, biases
included). v's q / k / v (or MLP output, or the logits) are then made from x_v by the family's
own norm and projection, as in path patching, and the run goes on. The senders of every receiver
are the first of the graph's senders in the order they write (graph.py), so the differences
corrupted - run are kept stacked as they are written, (copy, sender, batch, pos, embed_dim), and
the shifts of all the receivers of one layer (its q, k, v inputs; its MLP; the logits) are one
batched product per copy: the 0/1 mask of patched edges (copy, receiver, sender) times the
stacked differences (copy, sender, batch * pos * embed_dim). Its products with 0 and 1 are exact,
so it equals the sum over the patched edges up to the order of the additions.

This needs each sender's write in every run. Where nothing follows W_O (or the MLP) before the
residual add, a head's write is its output through its own slice of W_O (an MLP's: its output),
and the sum is over single senders. ``CircuitPatcher`` checks that on the model (the writes path
patching measures equal these). Where a norm follows them (Gemma 2's post-attention and
post-feedforward norms, soft-capping elsewhere), one head's write depends on the others', so the
patched senders of one layer are taken together: for receiver v and each earlier layer L,

    x_v += W_L(this run's head outputs with v's patched heads of L corrupted, MLP as patched)
           - W_L(this run's head outputs and MLP)

with W_L(heads, mlp) what block L adds to the stream when its head outputs and MLP output are
these (the block run on them). One edge is then path patching's write, every edge the corrupted
stream (the sum over layers telescopes to x_v(corrupted) - x_v(run)), and for linear writes it
is the per-sender sum.

Circuits are batched on the batch axis; the run goes layer by layer (resume.py): per layer, the
receivers' inputs (every receiver of the layer, stacked), the layer with their q, k, v spliced,
and, for an MLP, its input and the layer again with the MLP's output replaced.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.attention.one_thread import one_torch_thread
from headlab.circuits.graph import EMBED, LOGITS, Graph
from headlab.circuits.patching import Patcher
from headlab.models.run_protocol import StopAt


class CircuitPatcher:
    """Sets of patched edges evaluated against ``patcher``'s clean and corrupted runs (writes
    per sender where they are linear after W_O, per sender layer where a norm follows W_O: see
    the module docstring)."""

    def __init__(self, patcher: Patcher) -> None:
        self.patcher = patcher
        self.graph = patcher.graph
        self.runner = patcher.runner
        self.w_o = []  # per layer: (head, embed_dim, d_head)
        for block in self.runner.blocks:
            layer = block.attention
            weight = layer.output_weight()
            if weight is None:
                raise ValueError(f"layer {block.index} has no output projection W_O of its heads")
            self.w_o.append(
                weight.detach().view(weight.shape[0], layer.num_heads, -1).permute(1, 0, 2)
            )
        self.linear = patcher.writes_are_linear()
        #: every sender, in the order they write: the receivers' senders are its prefixes
        self.senders = [node.name for node in self.graph.senders()]
        self._inputs = ReceiverEdges(self.graph, self.senders)

    # ------------------------------------------------------------------ writes
    def head_writes(self, layer: int, head_outputs: Tensor) -> Tensor:
        """(batch, head, pos, d_head) head outputs -> (head, batch, pos, embed_dim) writes."""
        return torch.einsum("bhtd,hed->hbte", head_outputs, self.w_o[layer])

    # ------------------------------------------------------------------ the run
    def metric(self, patched: Sequence[set[str]]) -> Tensor:
        """(len(patched),) float64: the metric with each set's edges patched (names of
        graph.py); an empty set gives the clean metric, every edge the corrupted one.
        ValueError for an unknown edge name. Runs on one torch thread while another process
        competes for the cores (``one_torch_thread``: measured in docs/benchmarks.md)."""
        index = self.graph.edge_index
        for edges in patched:
            for name in edges:
                if name not in index:
                    self.graph.edge(name)  # raises, naming what is wrong
        with torch.no_grad(), one_torch_thread(when_busy=True):
            return self._run([set(s) for s in patched]).double()

    def _run(self, patched: list[set[str]]) -> Tensor:
        p, runner = self.patcher, self.runner
        copies = len(patched)
        n = len(runner.blocks)
        corrupted, clean = p.corrupted, p.clean
        stream = clean.resid[0].repeat(copies, 1, 1)
        chosen = self._chosen(patched, stream)  # (copy, edge) 0/1
        # corrupted minus this run's write of each sender written so far, in the order of
        # ``senders``: (copy, sender, batch, pos, embed_dim); only where writes are linear
        differences = None
        if self.linear:
            differences = stream.new_empty((copies, len(self.senders), *clean.resid[0].shape))
            differences[:, 0] = corrupted.resid[0] - clean.resid[0]
        # this run's head outputs and MLP outputs per layer (for writes taken per layer)
        self._run_heads: dict[int, Tensor] = {}
        self._run_mlp: dict[int, Tensor] = {}
        for block in runner.blocks:
            layer = block.index
            spliced = self._attention_inputs(layer, stream, chosen, differences)
            heads = self._heads(layer, stream, spliced)
            self._run_heads[layer] = heads
            if differences is not None:
                first = self._sender_index(f"{layer}.0")
                run = self.head_writes(layer, heads)  # (head, copy * batch, pos, embed_dim)
                run = run.view(run.shape[0], copies, -1, *run.shape[2:]).transpose(0, 1)
                corrupted_writes = self.head_writes(layer, corrupted.head_outputs[layer])
                differences[:, first : first + run.shape[1]] = corrupted_writes - run
            mlp_out = None
            if block.has_mlp:
                mlp_name = f"mlp.{layer}"
                shift = self._shifts([(mlp_name, "in")], chosen, differences, stream)[0]
                mlp_out = self._mlp(layer, stream + shift, heads)
                self._run_mlp[layer] = mlp_out
                if differences is not None:
                    run_mlp = mlp_out.view(copies, -1, *mlp_out.shape[1:])
                    differences[:, self._sender_index(mlp_name)] = corrupted.mlp[layer] - run_mlp
            stream = self._block(layer, stream, spliced, mlp_out)
        shift = self._shifts([(LOGITS, "in")], chosen, differences, stream)[0]
        return p.metric(runner.forward(n, stream + shift, copies))

    def _sender_index(self, name: str) -> int:
        return self._inputs.sender_index[name]

    def _chosen(self, patched: list[set[str]], like: Tensor) -> Tensor:
        """(copy, edge) 1 where the copy's set patches the edge (graph order), else 0, in the
        dtype and on the device of ``like``."""
        index = self.graph.edge_index
        chosen = like.new_zeros((len(patched), len(index)))
        for c, edges in enumerate(patched):
            if edges:
                chosen[c, torch.tensor([index[name] for name in edges])] = 1
        return chosen

    def _shifts(self, keys, chosen: Tensor, differences: Tensor | None, stream: Tensor) -> Tensor:
        """sum over patched edges u -> each receiver of ``keys`` of corrupted minus run write,
        per copy: (receiver, copy * batch, pos, embed_dim). Where writes are linear, one
        product of the patched-edge mask (copy, receiver, sender) with the stacked differences
        (copy, sender, batch * pos * embed_dim) for all of ``keys``, which read the same
        senders; else ``_layer_shift`` per receiver."""
        if not self.linear:
            return torch.stack([self._layer_shift(key, chosen, stream) for key in keys])
        starts, count = self._inputs.of(keys)
        mask = torch.stack([chosen[:, s : s + count] for s in starts], 1)  # (copy, recv, sender)
        if not bool(mask.any()):
            return stream.new_zeros((len(keys), *stream.shape))
        copies = chosen.shape[0]
        senders = differences[:, :count].reshape(copies, count, -1)
        product = torch.bmm(mask, senders)  # (copy, receiver, batch * pos * embed_dim)
        shape = (copies, len(keys), *differences.shape[2:])
        return product.view(shape).transpose(0, 1).reshape(len(keys), *stream.shape)

    def _layer_shift(self, key, chosen: Tensor, run_stream):
        """The shift of one receiver where writes are not linear after W_O: the patched senders
        of each layer taken together (module docstring), (copies * batch, pos, embed_dim)."""
        p, b = self.patcher, self.patcher.batch
        (start,), count = self._inputs.of([key])
        senders = self.senders[:count]
        picked = chosen[:, start : start + count].bool().tolist()
        shift = torch.zeros_like(run_stream)
        # sender layer -> [(rows, mixed heads, this run's heads, mixed MLP, this run's MLP)]
        wanted: dict[int, list] = defaultdict(list)
        for c, flags in enumerate(picked):
            rows = slice(c * b, (c + 1) * b)
            by_layer: dict[int, tuple[list[int], list[bool]]] = {}
            for u, patched in zip(senders, flags, strict=True):
                if not patched:
                    continue
                if u == EMBED:
                    shift[rows] += p.corrupted.resid[0] - p.clean.resid[0]
                    continue
                node = self.graph.node(u)
                heads, mlp = by_layer.setdefault(node.layer, ([], [False]))
                if node.kind == "mlp":
                    mlp[0] = True
                else:
                    heads.append(node.index)
            for layer, (heads, mlp) in by_layer.items():
                run_heads = self._run_heads[layer][rows]
                mixed = run_heads.clone()
                mixed[:, heads] = p.corrupted.head_outputs[layer][:, heads]
                # the MLP of the receiver's own layer is no sender of it: held at any value
                run_mlp = (
                    self._run_mlp[layer][rows] if layer in self._run_mlp else p.clean.mlp[layer]
                )
                mixed_mlp = p.corrupted.mlp[layer] if mlp[0] else run_mlp
                wanted[layer].append((rows, mixed, run_heads, mixed_mlp, run_mlp))
        for layer, items in wanted.items():
            heads = torch.cat([i[1] for i in items] + [i[2] for i in items])
            mlps = None
            if self.runner.blocks[layer].has_mlp:
                mlps = torch.cat([i[3] for i in items] + [i[4] for i in items])
            writes = self._block_writes(layer, heads, mlps)
            n = len(items)
            for k, (rows, *_) in enumerate(items):
                shift[rows] += writes[k * b : (k + 1) * b] - writes[(n + k) * b : (n + k + 1) * b]
        return shift

    def _block_writes(self, layer: int, heads: Tensor, mlp: Tensor | None) -> Tensor:
        """What block ``layer`` adds to the stream with its head outputs ``heads`` (copies *
        batch, head, pos, d_head) and MLP output ``mlp`` (copies * batch, pos, embed_dim), up
        to a constant the same for every copy: (copies * batch, pos, embed_dim)."""
        block = self.runner.blocks[layer]
        copies = heads.shape[0] // self.patcher.batch
        hidden = self.patcher.clean.resid[layer].repeat(copies, 1, 1)

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(intervene(block.attention, "head_outputs", lambda t: heads))
            if mlp is not None:
                stack.enter_context(intervene(block, "mlp_out", lambda t: mlp))

        stop = StopAt(layer, "resid_out")
        return self.runner.forward(layer, hidden, copies, hooks, stop=stop) - hidden

    def _attention_inputs(self, layer, stream, chosen, differences):
        """Each attention receiver's q / k / v from its shifted input: site -> {index: (copies *
        batch, pos, d_head)} for the receivers whose input moved."""
        shape = self.graph.layers[layer]
        receivers = [(f"{layer}.{h}", "q", h) for h in range(shape.num_heads)]
        for g in range(shape.num_kv_heads):
            name = self.graph.kv_receiver(layer, g * shape.group_size)
            receivers += [(name, "k", g), (name, "v", g)]
        keys = [(name, site) for name, site, _ in receivers]
        moved, shifts = [], []
        shifted = self._shifts(keys, chosen, differences, stream)
        for (_, site, index), shift in zip(receivers, shifted, strict=True):
            if bool(shift.any()):
                moved.append((site, index))
                shifts.append(stream + shift)
        spliced: dict[str, dict[int, Tensor]] = {"q": {}, "k": {}, "v": {}}
        if not moved:
            return spliced
        copies = stream.shape[0] // self.patcher.batch
        rows = stream.shape[0]
        seen = self.runner.values(layer, torch.cat(shifts), copies * len(moved))
        for r, (site, index) in enumerate(moved):
            spliced[site][index] = seen[site][r * rows : (r + 1) * rows, index]
        return spliced

    def _splice_hooks(self, stack: ExitStack, layer: int, spliced) -> None:
        attention = self.runner.blocks[layer].attention
        for site, values in spliced.items():
            if values:

                def fn(t: Tensor, values=values) -> Tensor:
                    out = t.clone()
                    for index, value in values.items():
                        out[:, index] = value
                    return out

                stack.enter_context(intervene(attention, site, fn))

    def _heads(self, layer: int, stream: Tensor, spliced) -> Tensor:
        """Layer ``layer``'s head outputs in this run (its receivers spliced)."""

        def hooks(stack: ExitStack) -> None:
            self._splice_hooks(stack, layer, spliced)

        copies = stream.shape[0] // self.patcher.batch
        return self.runner.forward(layer, stream, copies, hooks, stop=StopAt(layer, "head_outputs"))

    def _mlp(self, layer: int, shifted: Tensor, heads: Tensor) -> Tensor:
        """The MLP's output on its shifted input (the layer's heads held at this run's)."""
        block = self.runner.blocks[layer]

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(intervene(block.attention, "head_outputs", lambda t: heads))

        copies = shifted.shape[0] // self.patcher.batch
        return self.runner.forward(layer, shifted, copies, hooks, stop=StopAt(layer, "mlp_out"))

    def _block(self, layer: int, stream: Tensor, spliced, mlp_out: Tensor | None) -> Tensor:
        """The stream leaving layer ``layer`` in this run."""
        block = self.runner.blocks[layer]

        def hooks(stack: ExitStack) -> None:
            self._splice_hooks(stack, layer, spliced)
            if mlp_out is not None:
                stack.enter_context(intervene(block, "mlp_out", lambda t: mlp_out))

        copies = stream.shape[0] // self.patcher.batch
        return self.runner.forward(layer, stream, copies, hooks, stop=StopAt(layer, "resid_out"))


class ReceiverEdges:
    """Where each receiver's edges are in the graph's order: ``of(keys)`` -> (the first edge of
    each (receiver, input) key, the number of senders they read); ``sender_index``: sender name
    -> its place in the order senders write. ValueError where a receiver's senders are not the
    first senders in that order (the stacked differences of ``CircuitPatcher`` need it)."""

    def __init__(self, graph: Graph, senders: list[str]) -> None:
        self.sender_index = {name: i for i, name in enumerate(senders)}
        self.ranges: dict[tuple[str, str], tuple[int, int]] = {}
        for i, edge in enumerate(graph.edges):
            key = (edge.receiver, edge.input)
            start, count = self.ranges.get(key, (i, 0))
            if start + count != i or self.sender_index.get(edge.sender) != count:
                raise ValueError(
                    f"the senders into {edge.receiver} <{edge.input}> are not the "
                    "first senders in the order they write"
                )
            self.ranges[key] = (start, count + 1)

    def of(self, keys) -> tuple[list[int], int]:
        ranges = [self.ranges[key] for key in keys]
        counts = {count for _, count in ranges}
        if len(counts) != 1:
            raise ValueError(f"receivers {keys} read different senders")
        return [start for start, _ in ranges], counts.pop()


__all__ = ["CircuitPatcher"]

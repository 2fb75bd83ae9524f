"""Patching a set of edges at once (a circuit's complement): the metric when the edges of a set
carry their senders' corrupted values and every other edge carries the value of the run itself
(EAP-IG's and MIB's evaluation; with one edge in the set it is path patching, patching.py).

For receiver v, with write_u(run) u's write in this run and write_u(corrupted) in the corrupted
run:

    x_v = x_v(run) + sum over patched edges u -> v of (write_u(corrupted) - write_u(run))

where x_v(run) is the stream v reads in this run (the sum of every earlier write, biases
included). v's q / k / v (or MLP output, or the logits) are then made from x_v by the family's
own norm and projection, as in path patching, and the run goes on. The sum is taken over the
patched edges, or, when they are most of v's edges, as the stream's whole difference minus the
unpatched ones:  sum over all u of the differences = x_v(corrupted) - x_v(run).

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
from headlab.circuits.graph import EMBED, LOGITS
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

    # ------------------------------------------------------------------ writes
    def head_writes(self, layer: int, head_outputs: Tensor) -> Tensor:
        """(batch, head, pos, d_head) head outputs -> (head, batch, pos, embed_dim) writes."""
        return torch.einsum("bhtd,hed->hbte", head_outputs, self.w_o[layer])

    # ------------------------------------------------------------------ the run
    def metric(self, patched: Sequence[set[str]]) -> Tensor:
        """(len(patched),) float64: the metric with each set's edges patched (names of
        graph.py); an empty set gives the clean metric, every edge the corrupted one.
        ValueError for an unknown edge name."""
        for edges in patched:
            for name in edges:
                self.graph.edge(name)
        with torch.no_grad():
            return self._run([set(s) for s in patched]).double()

    def _run(self, patched: list[set[str]]) -> Tensor:
        p, runner = self.patcher, self.runner
        copies = len(patched)
        n = len(runner.blocks)
        corrupted, clean = p.corrupted, p.clean
        # this run's write of each sender that has written, (copies * batch, pos, embed_dim)
        run_writes: dict[str, Tensor] = {EMBED: clean.resid[0].repeat(copies, 1, 1)}
        corrupted_writes: dict[str, Tensor] = {EMBED: corrupted.resid[0]}
        stream = clean.resid[0].repeat(copies, 1, 1)
        # this run's head outputs and MLP outputs per layer (for writes taken per layer)
        self._run_heads: dict[int, Tensor] = {}
        self._run_mlp: dict[int, Tensor] = {}
        for block in runner.blocks:
            layer = block.index
            corrupted_writes.update(self._named_heads(layer, corrupted.head_outputs[layer]))
            spliced = self._attention_inputs(layer, stream, patched, run_writes, corrupted_writes)
            heads = self._heads(layer, stream, spliced)
            self._run_heads[layer] = heads
            for name, write in self._named_heads(layer, heads).items():
                run_writes[name] = write
            mlp_out = None
            if block.has_mlp:
                mlp_name = f"mlp.{layer}"
                base = stream + self._attention_write(layer, heads, block.parallel)
                corrupted_base = corrupted.resid[layer] + (
                    0 if block.parallel else self._attention_write(
                        layer, corrupted.head_outputs[layer], False)
                )  # fmt: skip
                shift = self._shift((mlp_name, "in"), patched, base, corrupted_base,
                                    run_writes, corrupted_writes)  # fmt: skip
                mlp_out = self._mlp(layer, stream + shift, heads)
                self._run_mlp[layer] = mlp_out
                run_writes[mlp_name] = mlp_out
                corrupted_writes[mlp_name] = corrupted.mlp[layer]
            stream = self._block(layer, stream, spliced, mlp_out)
        shift = self._shift((LOGITS, "in"), patched, stream, corrupted.resid[n], run_writes,
                            corrupted_writes)  # fmt: skip
        return p.metric(runner.forward(n, stream + shift, copies))

    def _named_heads(self, layer: int, head_outputs: Tensor) -> dict[str, Tensor]:
        writes = self.head_writes(layer, head_outputs)
        return {f"{layer}.{h}": writes[h] for h in range(writes.shape[0])}

    def _attention_write(self, layer: int, head_outputs: Tensor, parallel: bool) -> Tensor:
        """What layer ``layer``'s heads add to the stream the MLP reads (0 when parallel)."""
        if parallel:
            return torch.zeros((), dtype=head_outputs.dtype)
        return self.head_writes(layer, head_outputs).sum(0)

    def _shift(self, key, patched, run_stream, corrupted_stream, run_writes, corrupted_writes):
        """sum over patched edges u -> receiver ``key`` of corrupted minus run write, per copy:
        (copies * batch, pos, embed_dim)."""
        if not self.linear:
            return self._layer_shift(key, patched, run_stream)
        receiver, input_ = key
        senders = [e.sender for e in self.graph.edges_into(receiver, input_)]
        b = self.patcher.batch
        shift = torch.zeros_like(run_stream)
        for c, edges in enumerate(patched):
            rows = slice(c * b, (c + 1) * b)
            chosen = [u for u in senders if f"{u}->{_suffix(receiver, input_)}" in edges]
            if not chosen:
                continue
            if 2 * len(chosen) <= len(senders):
                total = sum(corrupted_writes[u] - run_writes[u][rows] for u in chosen)
            else:  # the whole difference, less the unpatched edges'
                kept = [u for u in senders if u not in set(chosen)]
                total = corrupted_stream - run_stream[rows]
                total = total - sum((corrupted_writes[u] - run_writes[u][rows] for u in kept),
                                    torch.zeros_like(total))  # fmt: skip
            shift[rows] = total
        return shift

    def _layer_shift(self, key, patched, run_stream):
        """``_shift`` where writes are not linear after W_O: the patched senders of each layer
        taken together (module docstring), (copies * batch, pos, embed_dim)."""
        receiver, input_ = key
        p, b = self.patcher, self.patcher.batch
        senders = [e.sender for e in self.graph.edges_into(receiver, input_)]
        shift = torch.zeros_like(run_stream)
        # sender layer -> [(rows, mixed heads, this run's heads, mixed MLP, this run's MLP)]
        wanted: dict[int, list] = defaultdict(list)
        for c, edges in enumerate(patched):
            rows = slice(c * b, (c + 1) * b)
            by_layer: dict[int, tuple[list[int], list[bool]]] = {}
            for u in senders:
                if f"{u}->{_suffix(receiver, input_)}" not in edges:
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
                run_mlp = self._run_mlp[layer][rows] if layer in self._run_mlp else \
                    p.clean.mlp[layer]  # fmt: skip
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

    def _attention_inputs(self, layer, stream, patched, run_writes, corrupted_writes):
        """Each attention receiver's q / k / v from its shifted input: site -> {index: (copies *
        batch, pos, d_head)} for the receivers whose input moved."""
        shape = self.graph.layers[layer]
        corrupted_stream = self.patcher.corrupted.resid[layer]
        receivers = [(f"{layer}.{h}", "q", h) for h in range(shape.num_heads)]
        for g in range(shape.num_kv_heads):
            name = self.graph.kv_receiver(layer, g * shape.group_size)
            receivers += [(name, "k", g), (name, "v", g)]
        moved, shifts = [], []
        for name, site, index in receivers:
            shift = self._shift((name, site), patched, stream, corrupted_stream, run_writes,
                                corrupted_writes)  # fmt: skip
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
        return self.runner.forward(layer, stream, copies, hooks,
                                   stop=StopAt(layer, "head_outputs"))  # fmt: skip

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


def _suffix(receiver: str, input_: str) -> str:
    return f"{receiver}<{input_}>" if input_ in ("q", "k", "v") else receiver


__all__ = ["CircuitPatcher"]

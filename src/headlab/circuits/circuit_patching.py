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

This needs each sender's write in every run, so it takes a head's write to be its output through
its own slice of W_O (an MLP's: its output), which is exact only where nothing follows W_O (or the
MLP) before the residual add. ``CircuitPatcher`` checks that on the model (the writes path
patching measures equal these) and refuses families with a norm after W_O (Gemma 2).

Circuits are batched on the batch axis; the run goes layer by layer (resume.py): per layer, the
receivers' inputs (every receiver of the layer, stacked), the layer with their q, k, v spliced,
and, for an MLP, its input and the layer again with the MLP's output replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.graph import EMBED, LOGITS
from headlab.circuits.patching import Patcher
from headlab.circuits.resume import Stop, hooked, replaced_output, until_values


class CircuitPatcher:
    """Sets of patched edges evaluated against ``patcher``'s clean and corrupted runs.
    ValueError for a family whose writes are not linear after W_O (see the module docstring)."""

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
        self._check_linear()

    # ------------------------------------------------------------------ writes
    def head_writes(self, layer: int, head_outputs: Tensor) -> Tensor:
        """(batch, head, pos, d_head) head outputs -> (head, batch, pos, embed_dim) writes."""
        return torch.einsum("bhtd,hed->hbte", head_outputs, self.w_o[layer])

    def _check_linear(self) -> None:
        p = self.patcher
        if not p.writes_are_linear():
            raise ValueError(
                f"family {p.runner.model.family!r}: a head's write is not its output through "
                "W_O (a norm follows W_O or the MLP), so edges into one receiver cannot be "
                "patched apart; patch single edges (path_patching) instead"
            )

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
        for block in runner.blocks:
            layer = block.index
            corrupted_writes.update(self._named_heads(layer, corrupted.head_outputs[layer]))
            spliced = self._attention_inputs(layer, stream, patched, run_writes, corrupted_writes)
            heads = self._heads(layer, stream, spliced)
            for name, write in self._named_heads(layer, heads).items():
                run_writes[name] = write
            mlp_out = None
            if block.mlp is not None:
                mlp_name = f"mlp.{layer}"
                base = stream + self._attention_write(layer, heads, block.parallel)
                corrupted_base = corrupted.resid[layer] + (
                    0 if block.parallel else self._attention_write(
                        layer, corrupted.head_outputs[layer], False)
                )  # fmt: skip
                shift = self._shift((mlp_name, "in"), patched, base, corrupted_base,
                                    run_writes, corrupted_writes)  # fmt: skip
                mlp_out = self._mlp(layer, stream + shift, heads)
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

    def _attention_inputs(self, layer, stream, patched, run_writes, corrupted_writes):
        """Each attention receiver's q / k / v from its shifted input: site -> {index: (copies *
        batch, pos, d_head)} for the receivers whose input moved."""
        block = self.runner.blocks[layer]
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
        seen: dict[str, Tensor] = {}
        copies = stream.shape[0] // self.patcher.batch
        rows = stream.shape[0]
        hooks = until_values(block.attention, seen)
        self.runner.forward(layer, torch.cat(shifts), copies * len(moved), hooks)
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
        block = self.runner.blocks[layer]

        def hooks(stack: ExitStack) -> None:
            self._splice_hooks(stack, layer, spliced)

            def stop(t: Tensor) -> None:
                raise Stop(t)

            stack.enter_context(intervene(block.attention, "head_outputs", stop))

        return self.runner.forward(layer, stream, stream.shape[0] // self.patcher.batch, hooks)

    def _mlp(self, layer: int, shifted: Tensor, heads: Tensor) -> Tensor:
        """The MLP's output on its shifted input (the layer's heads held at this run's)."""
        block = self.runner.blocks[layer]

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(intervene(block.attention, "head_outputs", lambda t: heads))

            def stop(_module, _args, output):
                raise Stop(output if isinstance(output, Tensor) else output[0])

            stack.enter_context(hooked(block.mlp, "post", stop))

        return self.runner.forward(layer, shifted, shifted.shape[0] // self.patcher.batch, hooks)

    def _block(self, layer: int, stream: Tensor, spliced, mlp_out: Tensor | None) -> Tensor:
        """The stream leaving layer ``layer`` in this run."""
        block = self.runner.blocks[layer]

        def hooks(stack: ExitStack) -> None:
            self._splice_hooks(stack, layer, spliced)
            if mlp_out is not None:
                replace = lambda _m, _a, out: replaced_output(out, mlp_out)  # noqa: E731
                stack.enter_context(hooked(block.mlp, "post", replace))

            def stop(_module, _args, output):
                raise Stop(output if isinstance(output, Tensor) else output[0])

            stack.enter_context(hooked(block.module, "post", stop))

        return self.runner.forward(layer, stream, stream.shape[0] // self.patcher.batch, hooks)


def _suffix(receiver: str, input_: str) -> str:
    return f"{receiver}<{input_}>" if input_ in ("q", "k", "v") else receiver


__all__ = ["CircuitPatcher"]

"""``CircuitPatcher``'s shifts as one product per receiver layer (the patched-edge mask times the
stacked corrupted-minus-run writes) equal the loop over senders they replaced, kept here as the
reference (``LoopPatcher``, its code as it was), in float64 on Llama (GQA), GPT-2, Qwen3
(QK-norm) and Gemma 2 (norms after W_O: writes taken per sender layer): no edge, every edge,
single edges and random sets of every density, several sets per call."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from test_attribution import _task
from test_path_patching import sharp

from headlab.circuits.circuit_patching import CircuitPatcher, ReceiverEdges
from headlab.circuits.graph import EMBED, LOGITS, Graph, LayerShape
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach


def _suffix(receiver: str, input_: str) -> str:
    return f"{receiver}<{input_}>" if input_ in ("q", "k", "v") else receiver


class LoopPatcher(CircuitPatcher):
    """The reference: ``CircuitPatcher``'s run as it was before the product, one tensor per
    sender per receiver summed in a Python loop (copied unchanged, but for its names)."""

    def _run(self, patched):
        p, runner = self.patcher, self.runner
        copies = len(patched)
        n = len(runner.blocks)
        corrupted, clean = p.corrupted, p.clean
        run_writes = {EMBED: clean.resid[0].repeat(copies, 1, 1)}
        corrupted_writes = {EMBED: corrupted.resid[0]}
        stream = clean.resid[0].repeat(copies, 1, 1)
        self._run_heads, self._run_mlp = {}, {}
        for block in runner.blocks:
            layer = block.index
            corrupted_writes.update(self._named_heads(layer, corrupted.head_outputs[layer]))
            spliced = self._loop_inputs(layer, stream, patched, run_writes, corrupted_writes)
            heads = self._heads(layer, stream, spliced)
            self._run_heads[layer] = heads
            for name, write in self._named_heads(layer, heads).items():
                run_writes[name] = write
            mlp_out = None
            if block.has_mlp:
                mlp_name = f"mlp.{layer}"
                base = stream + self._attention_write(layer, heads, block.parallel)
                corrupted_base = corrupted.resid[layer] + (
                    0
                    if block.parallel
                    else self._attention_write(layer, corrupted.head_outputs[layer], False)
                )
                shift = self._shift(
                    (mlp_name, "in"), patched, base, corrupted_base, run_writes, corrupted_writes
                )
                mlp_out = self._mlp(layer, stream + shift, heads)
                self._run_mlp[layer] = mlp_out
                run_writes[mlp_name] = mlp_out
                corrupted_writes[mlp_name] = corrupted.mlp[layer]
            stream = self._block(layer, stream, spliced, mlp_out)
        shift = self._shift(
            (LOGITS, "in"), patched, stream, corrupted.resid[n], run_writes, corrupted_writes
        )
        return p.metric(runner.forward(n, stream + shift, copies))

    def _named_heads(self, layer, head_outputs):
        writes = self.head_writes(layer, head_outputs)
        return {f"{layer}.{h}": writes[h] for h in range(writes.shape[0])}

    def _attention_write(self, layer, head_outputs, parallel):
        if parallel:
            return torch.zeros((), dtype=head_outputs.dtype)
        return self.head_writes(layer, head_outputs).sum(0)

    def _shift(self, key, patched, run_stream, corrupted_stream, run_writes, corrupted_writes):
        if not self.linear:
            return self._loop_layer_shift(key, patched, run_stream)
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
                total = total - sum(
                    (corrupted_writes[u] - run_writes[u][rows] for u in kept),
                    torch.zeros_like(total),
                )
            shift[rows] = total
        return shift

    def _loop_layer_shift(self, key, patched, run_stream):
        receiver, input_ = key
        p, b = self.patcher, self.patcher.batch
        senders = [e.sender for e in self.graph.edges_into(receiver, input_)]
        shift = torch.zeros_like(run_stream)
        wanted = defaultdict(list)
        for c, edges in enumerate(patched):
            rows = slice(c * b, (c + 1) * b)
            by_layer = {}
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

    def _loop_inputs(self, layer, stream, patched, run_writes, corrupted_writes):
        shape = self.graph.layers[layer]
        corrupted_stream = self.patcher.corrupted.resid[layer]
        receivers = [(f"{layer}.{h}", "q", h) for h in range(shape.num_heads)]
        for g in range(shape.num_kv_heads):
            name = self.graph.kv_receiver(layer, g * shape.group_size)
            receivers += [(name, "k", g), (name, "v", g)]
        moved, shifts = [], []
        for name, site, index in receivers:
            shift = self._shift(
                (name, site), patched, stream, corrupted_stream, run_writes, corrupted_writes
            )
            if bool(shift.any()):
                moved.append((site, index))
                shifts.append(stream + shift)
        spliced = {"q": {}, "k": {}, "v": {}}
        if not moved:
            return spliced
        copies = stream.shape[0] // self.patcher.batch
        rows = stream.shape[0]
        seen = self.runner.values(layer, torch.cat(shifts), copies * len(moved))
        for r, (site, index) in enumerate(moved):
            spliced[site][index] = seen[site][r * rows : (r + 1) * rows, index]
        return spliced


def _sets(names: list[str], seed: int) -> list[set[str]]:
    """No edge, every edge, a few single edges, and random sets from sparse to dense."""
    generator = torch.Generator().manual_seed(seed)
    sets = [set(), set(names)]
    sets += [{names[int(i)]} for i in torch.randint(len(names), (3,), generator=generator)]
    for density in (0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98):
        keep = torch.rand(len(names), generator=generator) < density
        sets.append({n for n, k in zip(names, keep.tolist(), strict=True) if k})
    return sets


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen3", "gemma2"])
def test_the_product_equals_the_loop_over_senders_in_float64(family):
    clean, corrupted, metric = _task()
    model = attach(sharp(family).double())
    patcher = Patcher(model, clean, corrupted, metric)
    product, loop = CircuitPatcher(patcher), LoopPatcher(patcher)
    assert product.linear == (family != "gemma2")
    names = [e.name for e in patcher.graph.edges]
    sets = _sets(names, seed=len(names))
    together = product.metric(sets)  # several sets per call, and each alone
    alone = torch.cat([product.metric([s]) for s in sets[:5]])
    want = loop.metric(sets)
    scale = float((want - patcher.clean_value).abs().max())
    assert scale > 1e-2  # the sets move the metric
    torch.testing.assert_close(together, want, rtol=0, atol=1e-10 * scale)
    torch.testing.assert_close(alone, want[:5], rtol=0, atol=1e-10 * scale)
    assert float(together[0]) == pytest.approx(patcher.clean_value, abs=1e-10)
    assert float(together[1]) == pytest.approx(patcher.corrupted_value, abs=1e-10)


def test_receivers_read_the_first_senders_in_the_order_they_write():
    graph = Graph.of([LayerShape(3, 1), LayerShape(2, 2, parallel=True), LayerShape(2, 1, False)])
    senders = [n.name for n in graph.senders()]
    edges = ReceiverEdges(graph, senders)
    for (receiver, input_), (start, count) in edges.ranges.items():
        into = graph.edges_into(receiver, input_)
        assert [e.sender for e in into] == senders[:count]
        assert graph.edges[start : start + count] == tuple(into)
    assert sum(count for _, count in edges.ranges.values()) == len(graph.edges)
    with pytest.raises(ValueError, match="not the first senders"):
        ReceiverEdges(graph, senders[::-1])

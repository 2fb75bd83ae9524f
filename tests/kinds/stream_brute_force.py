"""Path patching of one edge of an encoder-decoder (or of an image encoder), by brute force: every
step a whole forward of the model's own code (``EncoderDecoderModel.run``: transformers' forward,
teacher-forced; an image encoder: transformers' forward on the pixel values) with
interventions at the blocks' and attentions' sites; none of the run protocol's starts,
``sources`` or stacked copies. ``scale`` may be a tensor with autograd, so that the derivative
of the metric along the edge at 0 (what EAP estimates) comes from autograd through the same
runs.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene


class BruteForce:
    """Whole forwards of ``model`` on ``clean``, with the corrupted values of ``corrupted``."""

    def __init__(self, model, clean, corrupted, metric, run=None) -> None:
        """``run``: batch -> the metric's logits (batch, pos, vocab) of one whole forward of the
        model's own code (default: an encoder-decoder's teacher-forced ``run``)."""
        self.model, self.input, self.metric = model, clean, metric
        self.run = run or (lambda batch: model.run(batch["encoder"], batch["decoder"]))
        self.blocks = model.blocks()
        self.starts = {b.stream: b.index for b in reversed(self.blocks)}  # each stream's first
        self.first_decoder = self.starts.get("decoder")
        self.clean = self.record(clean)
        self.corrupted = self.record(corrupted)
        self.clean_value = float(self.value([]).detach())
        self.writes: dict = {}

    def forward(self, interventions, batch=None) -> Tensor:
        """The metric's logits (batch, n_kept, vocab) of one whole forward with
        ``interventions``: (module, site, fn) triples."""
        batch = self.input if batch is None else batch
        with ExitStack() as stack:
            for module, site, fn in interventions:
                stack.enter_context(intervene(module, site, fn))
            logits = self.run(batch)
        return logits[:, self.metric.positions]

    def value(self, interventions) -> Tensor:
        return self.metric(self.forward(interventions))[0]

    def record(self, batch) -> dict:
        seen: dict = {}

        def keep(key):
            return lambda t: seen.__setitem__(key, t.detach())

        points = []
        for b in self.blocks:
            points += [
                (b, "resid_in", keep(("in", b.index))),
                (b, "resid_out", keep(("out", b.index))),
                (b.attention, "head_outputs", keep(("self", b.index))),
                (b, "mlp_out", keep(("mlp", b.index))),
            ]
            if b.cross_attention is not None:
                points.append((b.cross_attention, "head_outputs", keep(("cross", b.index))))
        with torch.no_grad():
            self.forward(points, batch)
        return seen

    def write(self, node) -> Tensor:
        """The sender's corrupted write minus its clean one, the rest of its block clean."""
        if node.name not in self.writes:
            self.writes[node.name] = self._write(node)
        return self.writes[node.name]

    def _write(self, node) -> Tensor:
        if node.kind == "embed":
            at = self.starts[node.stream]
            return self.corrupted[("in", at)] - self.clean[("in", at)]
        block = self.blocks[node.layer]
        part = {"head": "self", "cross": "cross", "mlp": "mlp"}[node.kind]

        def hold(which, module):
            def fn(t):
                out = self.clean[(which, node.layer)].clone()
                if which == part and which == "mlp":
                    out = self.corrupted[("mlp", node.layer)].clone()
                elif which == part:
                    out[:, node.index] = self.corrupted[(which, node.layer)][:, node.index]
                return out

            return (module, "head_outputs" if which != "mlp" else "mlp_out", fn)

        points = [hold("self", block.attention), hold("mlp", block)]
        if block.cross_attention is not None:
            points.append(hold("cross", block.cross_attention))
        seen = {}
        points.append((block, "resid_out", lambda t: seen.__setitem__("out", t.detach())))
        with torch.no_grad():
            self.forward(points)
        return seen["out"] - self.clean[("out", node.layer)]

    def effect(self, graph, edge, scale=1.0) -> Tensor:
        """metric(edge patched) - metric(clean); ``scale`` times the sender's write."""
        sender, receiver = graph.node(edge.sender), graph.node(edge.receiver)
        w = self.write(sender)
        if receiver.kind == "logits":
            shift = (self.blocks[-1], "resid_out", lambda t: t + scale * w)
            return self.value([shift]) - self.clean_value
        block = self.blocks[receiver.layer]
        if receiver.kind == "cross" and edge.input in ("k", "v"):  # through the final norm
            shifts = [(self.blocks[self.first_decoder - 1], "resid_out", lambda t: t + scale * w)]
        else:
            shifts = [(block, "resid_in", lambda t: t + scale * w)]
        if receiver.kind == "mlp" or (receiver.kind == "cross" and edge.input == "q"):
            clean_self = self.clean[("self", receiver.layer)]
            shifts.append((block.attention, "head_outputs", lambda t: clean_self))
        if receiver.kind == "mlp" and block.cross_attention is not None:
            clean_cross = self.clean[("cross", receiver.layer)]
            shifts.append((block.cross_attention, "head_outputs", lambda t: clean_cross))
        seen = {}
        if receiver.kind == "mlp":
            module, site = block, "mlp_out"
        else:
            module = block.cross_attention if receiver.kind == "cross" else block.attention
            site = edge.input
        shifts.append((module, site, lambda t: seen.__setitem__("x", t)))
        self.forward(shifts)
        patched = seen["x"]

        def splice(t):
            if receiver.kind == "mlp":
                return patched
            out = t.clone()
            out[:, receiver.index] = patched[:, receiver.index]
            return out

        return self.value([(module, site, splice)]) - self.clean_value

    def derivative(self, graph, edge) -> float:
        """d/d scale of ``effect`` at scale 0 (autograd through the same forwards)."""
        scale = torch.zeros((), dtype=torch.float64, requires_grad=True)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(self.effect(graph, edge, scale), scale)
        return float(grad)

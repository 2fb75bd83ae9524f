"""Edge attribution (EAP, Syed et al. 2023) across an encoder-decoder's two streams
(stream_graph.py), or along an image encoder's one: every edge at once, from one forward and
backward on the clean input.

    score(u -> v) = sum over batch, pos of  (write_u(corrupted) - write_u(clean)) . dm / dx_v

with u's write that of exact path patching (stream_patching.py) and x_v the stream as v alone
reads it: the stream entering v's block for a self-attention head (through the block's norm and
projection to v's q, k or v), for a cross-attention head's query (its block's self-attention
held at the clean outputs) and for an MLP (both attentions held: through the norm to the MLP's
input); the stream leaving the encoder's last block for a cross-attention head's key and value
(through the encoder's final norm, recomputed, and the cross-attention's projection); the
decoder's last block's output for the logits. It is the derivative of path patching's metric
along the edge's write at zero, which the tests check against autograd through the model's own
forward.

The backward keeps the metric's gradient at each receiver's site (q, k, v of each attention,
each MLP's input, the decoder's output); a short run per (block, site) takes it back to x_v, one
copy per head stacked on the batch axis (the run stops at the site: nothing after it runs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.metrics import Metric
from headlab.circuits.stream_patching import Progress, StreamPatcher
from headlab.models.run_protocol import StopAt
from headlab.results.circuit_edges import EdgeScores

#: (block, kind of receiver, site): kind as ``StreamPatcher.kind``; site "q", "k", "v", "in".
Key = tuple[int, str, str]


def _viewed(store: dict, key: Key):
    """An intervention handing on a view of its tensor and keeping the view: its gradient is the
    gradient through what reads the site alone."""

    def keep(t: Tensor) -> Tensor:
        store[key] = t.view_as(t)
        return store[key]

    return keep


def _leaf(t: Tensor) -> Tensor:
    return t.detach().requires_grad_(True)


def site_gradients(patcher: StreamPatcher, keys: set[Key]) -> dict[Key, Tensor]:
    """The metric's gradient at each receiver site of ``keys`` on the clean input: one forward
    and one backward of the model."""
    blocks, kept = patcher.blocks, {}

    def hooks(stack: ExitStack) -> None:
        for first in patcher.starts.values():
            stack.enter_context(intervene(blocks[first], "resid_in", _leaf))
        for layer, kind, site in keys:
            if kind == "logits":
                last = _viewed(kept, (layer, kind, site))
                stack.enter_context(intervene(blocks[-1], "resid_out", last))
                continue
            block = blocks[layer]
            if kind == "mlp":
                stack.enter_context(intervene(block, "mlp_in", _viewed(kept, (layer, kind, site))))
            else:
                attention = block.attention if kind == "self" else block.cross_attention
                stack.enter_context(intervene(attention, site, _viewed(kept, (layer, kind, site))))

    with torch.enable_grad():
        states = patcher.model.run_blocks(
            patcher.input, keep=patcher.positions, interventions=hooks
        )
        value = patcher.metric(patcher.model.unembed(states))[0]
        order = sorted(kept)
        grads = torch.autograd.grad(value, [kept[k] for k in order], allow_unused=True)
    return {
        k: torch.zeros_like(kept[k]) if g is None else g.detach()
        for k, g in zip(order, grads, strict=True)
    }


def input_gradients(patcher: StreamPatcher, key: Key, grad: Tensor) -> Tensor:
    """dm/dx_v for every receiver at ``key`` (block, kind, site) from the gradient at its site:
    (head, batch, pos, d_model) for an attention site, (1, batch, pos, d_model) for an MLP and
    the logits."""
    layer, kind, site = key
    b = patcher.batch
    if kind == "logits":
        return grad[None]
    clean = patcher.clean
    copies = 1 if kind == "mlp" else grad.shape[1]
    x = _leaf(clean.resid[layer].repeat(copies, 1, 1))
    sources = patcher.sources_for(layer, copies)
    if kind == "cross_kv":
        sources = _leaf(patcher.encoder_out(clean).repeat(copies, 1, 1))
    hooks = patcher.held_before(layer, kind)

    stop = StopAt(layer, "mlp_in") if kind == "mlp" else StopAt(layer, site, kind != "self")
    with torch.enable_grad():
        out = patcher.run(layer, x, copies, hooks, stop, sources)
        if kind == "mlp":
            wanted = grad
        else:  # copy c carries head c's gradient alone: (copies * batch, head, pos, d_head)
            wanted = torch.zeros_like(out)
            for c in range(copies):
                wanted[c * b : (c + 1) * b, c] = grad[:, c]
        leaf = sources if kind == "cross_kv" else x
        (gx,) = torch.autograd.grad(out, leaf, grad_outputs=wanted)
    return gx.view(copies, b, *gx.shape[1:])


def stream_attribution(
    model,
    clean: Mapping,
    corrupted: Mapping,
    metric: Metric,
    edges: Sequence[str] | None = None,
    *,
    patcher: StreamPatcher | None = None,
    progress: Progress | None = None,
) -> EdgeScores:
    """EAP scores of ``edges`` (default: every edge of the two streams' graph), see the module
    docstring; inputs as ``StreamPatcher``."""
    patcher = patcher or StreamPatcher(model, clean, corrupted, metric)
    graph = patcher.graph
    names = list(edges) if edges is not None else [e.name for e in graph.edges]
    parsed = [graph.edge(n) for n in names]
    by_key: dict[Key, list[int]] = defaultdict(list)
    for i, edge in enumerate(parsed):
        layer, kind = patcher.kind(edge)
        by_key[(layer, kind, edge.input)].append(i)
    site_grads = site_gradients(patcher, set(by_key))
    writes = patcher.writes(list(dict.fromkeys(e.sender for e in parsed)))
    scores = torch.zeros(len(parsed), dtype=torch.float64)
    with torch.no_grad():
        for done, (key, indices) in enumerate(sorted(by_key.items()), 1):
            per_receiver = input_gradients(patcher, key, site_grads[key])
            for i in indices:
                edge = parsed[i]
                at = 0 if key[1] in ("mlp", "logits") else graph.node(edge.receiver).index
                scores[i] = float((writes[edge.sender] * per_receiver[at]).sum())
            if progress is not None:
                progress(done, len(by_key))
    return EdgeScores(
        "eap", metric.kind, names, scores.tolist(), patcher.clean_value, patcher.corrupted_value
    )


__all__ = ["input_gradients", "site_gradients", "stream_attribution"]

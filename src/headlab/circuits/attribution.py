"""Edge attribution for every edge at once: EAP (Syed et al. 2023) and EAP-IG (Hanna et al.
2024, integrated gradients on the inputs).

An edge u -> v is scored by the first-order change of the metric when v's input carries u's
corrupted write instead of its clean one:

    score(u -> v) = sum over batch, pos of  (write_u(corrupted) - write_u(clean)) . dm / dx_v

x_v is the residual stream as v alone reads it (its own copy of the stream before its norm), so
dm/dx_v is the gradient through v only: through the norm, the projection, QK-norm and rotary to
v's q (a K/V group's k or v), through the norm to an MLP, or straight into the final norm for the
logits. The writes are the exact per-sender differences of path patching (patching.py); the
metric is a mean over the batch, so a score is in the metric's units, comparable with path
patching's effect of the same edge.

EAP takes the gradient on the clean input: one forward and one backward of the model, plus, per
layer, one backward through the short map from the stream to q, k, v (every receiver of the layer
at once, stacked on the batch axis) and one through the MLP. EAP-IG averages the gradient over
``steps`` inputs on the line from the corrupted to the clean input embeddings, as Hanna et al.'s
``get_scores_eap_ig`` does: alpha = k / steps, k = 0 .. steps - 1 (alpha = 0 is the corrupted
input, the clean one is not among them): ``steps`` times EAP's cost. The progress counts the
gradient runs and the layers' receivers (the scores' products after them are short).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.graph import LOGITS, Graph
from headlab.circuits.metrics import Metric
from headlab.circuits.patching import Patcher, Progress
from headlab.circuits.resume import Stop, hooked, until_values
from headlab.models.hf.adapter import TransformersModel
from headlab.results.circuit_edges import EdgeScores

METHODS = ("eap", "eap-ig")


@dataclass
class _Run:
    """One forward and backward: the stream entering each block (detached), each layer's head
    outputs, and the metric's gradient at every site a receiver reads."""

    resid: list[Tensor]
    head_outputs: list[Tensor]
    site_grads: list[dict[str, Tensor]]  # per layer: q (batch, head, pos, d_head), k, v
    mlp_grads: list[Tensor | None]  # per layer: (batch, pos, embed_dim) at the MLP's output
    final_grad: Tensor  # (batch, pos, embed_dim) at the last block's output


def _gradient_run(patcher: Patcher, hidden0: Tensor) -> _Run:
    runner = patcher.runner
    n = len(runner.blocks)
    resid: list = [None] * n
    heads: list = [None] * n
    tensors: dict[tuple, Tensor] = {}

    def keep_site(layer, site):
        def fn(t: Tensor) -> None:
            tensors[(layer, site)] = t
            if site == "head_outputs":
                heads[layer] = t.detach()

        return fn

    def hooks(stack: ExitStack) -> None:
        for block in runner.blocks:
            i = block.index
            keep_resid = lambda _m, a, i=i: resid.__setitem__(i, a[0].detach())  # noqa: E731
            stack.enter_context(hooked(block.module, "pre", keep_resid))
            for site in ("q", "k", "v", "head_outputs"):
                stack.enter_context(intervene(block.attention, site, keep_site(i, site)))
            if block.mlp is not None:
                stack.enter_context(hooked(block.mlp, "post", _keep_tensor(tensors, (i, "mlp"))))
        stack.enter_context(hooked(runner.blocks[-1].module, "post",
                                   _keep_tensor(tensors, ("final",))))  # fmt: skip

    x = hidden0.detach().requires_grad_(True)
    with torch.enable_grad():
        value = patcher.metric(runner.forward(0, x, 1, hooks))[0]
        keys = [k for k in tensors if k[-1] != "head_outputs"]
        grads = torch.autograd.grad(value, [tensors[k] for k in keys], allow_unused=True)
    got = {
        k: torch.zeros_like(tensors[k]) if g is None else g
        for k, g in zip(keys, grads, strict=True)
    }
    return _Run(
        resid=resid,
        head_outputs=heads,
        site_grads=[{s: got[(i, s)] for s in ("q", "k", "v")} for i in range(n)],
        mlp_grads=[got.get((i, "mlp")) for i in range(n)],
        final_grad=got[("final",)],
    )


def _keep_tensor(store: dict, key: tuple):
    def hook(_module, _args, output):
        store[key] = output if isinstance(output, Tensor) else output[0]

    return hook


def _attention_input_grads(patcher: Patcher, run: _Run, layer: int) -> dict[tuple, Tensor]:
    """dm/dx_v for every attention receiver input of ``layer``: (input, index) -> (batch, pos,
    embed_dim), one copy of the stream per receiver input, stacked on the batch axis."""
    block = patcher.runner.blocks[layer]
    heads, kv = block.attention.num_heads, block.attention.num_kv_heads
    receivers = [("q", h) for h in range(heads)] + [(s, g) for s in ("k", "v") for g in range(kv)]
    b, copies = patcher.batch, len(receivers)
    x = run.resid[layer].repeat(copies, 1, 1).requires_grad_(True)
    seen: dict[str, Tensor] = {}
    with torch.enable_grad():
        patcher.runner.forward(layer, x, copies, until_values(block.attention, seen))
        total = x.new_zeros(())
        for c, (site, i) in enumerate(receivers):
            grad = run.site_grads[layer][site][:, i]
            total = total + (seen[site][c * b : (c + 1) * b, i] * grad).sum()
        (gx,) = torch.autograd.grad(total, x)
    gx = gx.view(copies, b, *gx.shape[1:])
    return {r: gx[c] for c, r in enumerate(receivers)}


def _mlp_input_grad(patcher: Patcher, run: _Run, layer: int) -> Tensor:
    """dm/dx through layer ``layer``'s MLP alone (its heads held at this run's outputs)."""
    block = patcher.runner.blocks[layer]
    x = run.resid[layer].clone().requires_grad_(True)
    frozen = run.head_outputs[layer]

    def hooks(stack: ExitStack) -> None:
        stack.enter_context(intervene(block.attention, "head_outputs", lambda t: frozen))

        def stop(_module, _args, output):
            raise Stop(output if isinstance(output, Tensor) else output[0])

        stack.enter_context(hooked(block.mlp, "post", stop))

    with torch.enable_grad():
        out = patcher.runner.forward(layer, x, 1, hooks)
        (gx,) = torch.autograd.grad(out, x, grad_outputs=run.mlp_grads[layer])
    return gx


def receiver_grads(
    patcher: Patcher,
    alphas: Sequence[float],
    layers: set[int] | None = None,
    progress: Progress | None = None,
) -> dict[tuple[str, str], Tensor]:
    """(receiver, input) -> dm/dx_v (batch, pos, embed_dim), averaged over the inputs
    corrupted + alpha (clean - corrupted) of the embeddings; only the receivers of ``layers``
    (default: every layer; the logits always). ``progress(done, total)`` after each input's
    forward and backward and after each layer's receivers (total: the alphas times one plus
    the layers)."""
    graph: Graph = patcher.graph
    clean0, corrupted0 = patcher.clean.resid[0], patcher.corrupted.resid[0]
    total: dict[tuple[str, str], Tensor] = {}

    def add(key, grad):
        total[key] = total[key] + grad if key in total else grad.detach().clone()

    chosen = [b for b in patcher.runner.blocks if layers is None or b.index in layers]
    steps, done = len(alphas) * (1 + len(chosen)), 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, steps)

    for alpha in alphas:
        hidden0 = clean0 if alpha == 1 else corrupted0 + alpha * (clean0 - corrupted0)
        run = _gradient_run(patcher, hidden0)
        step()
        for block in chosen:
            layer = block.index
            for (site, i), grad in _attention_input_grads(patcher, run, layer).items():
                receiver = f"{layer}.{i}" if site == "q" else graph.kv_receiver(
                    layer, i * graph.layers[layer].group_size)  # fmt: skip
                add((receiver, site), grad)
            if block.mlp is not None:
                add((f"mlp.{layer}", "in"), _mlp_input_grad(patcher, run, layer))
            step()
        add((LOGITS, "in"), run.final_grad)
    return {k: v / len(alphas) for k, v in total.items()}


def edge_attribution(
    model: TransformersModel,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    *,
    method: str = "eap",
    steps: int = 5,
    edges: Sequence[str] | None = None,
    attention_mask: Tensor | None = None,
    patcher: Patcher | None = None,
    progress: Progress | None = None,
) -> EdgeScores:
    """EAP or EAP-IG scores of ``edges`` (default: every edge), see the module docstring.
    clean, corrupted: (batch, pos) int64 of one shape. ValueError for an unknown method or
    steps < 1 (before the model runs), and as ``Patcher``."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "eap-ig" and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    patcher = patcher or Patcher(model, clean, corrupted, metric, attention_mask)
    graph = patcher.graph
    names = list(edges) if edges is not None else [e.name for e in graph.edges]
    parsed = [graph.edge(n) for n in names]
    # EAP-IG as Hanna et al.'s get_scores_eap_ig: alpha = k / steps, k = 0 .. steps - 1 (the
    # corrupted input included, the clean one not)
    alphas = [1.0] if method == "eap" else [k / steps for k in range(steps)]
    layers = {graph.node(e.receiver).layer for e in parsed}
    grads = receiver_grads(patcher, alphas, layers, progress)
    senders = list(dict.fromkeys(e.sender for e in parsed))
    writes = patcher.writes(senders)
    row = {name: i for i, name in enumerate(senders)}
    flat = torch.stack([writes[name].reshape(-1) for name in senders])  # (sender, batch*pos*e)
    by_layer: dict[int, list[int]] = {}
    for i, edge in enumerate(parsed):
        by_layer.setdefault(graph.node(edge.receiver).layer, []).append(i)
    scores = torch.zeros(len(parsed), dtype=torch.float64)
    for indices in by_layer.values():  # one product per layer: (sender, n) @ (n, receiver)
        keys = list(dict.fromkeys((parsed[i].receiver, parsed[i].input) for i in indices))
        column = {key: j for j, key in enumerate(keys)}
        block = flat @ torch.stack([grads[key].reshape(-1) for key in keys]).t()
        for i in indices:
            edge = parsed[i]
            scores[i] = float(block[row[edge.sender], column[(edge.receiver, edge.input)]])
    return EdgeScores(
        method=method,
        metric=metric.kind,
        edges=names,
        scores=scores.tolist(),
        clean_metric=patcher.clean_value,
        corrupted_metric=patcher.corrupted_value,
    )


__all__ = ["METHODS", "edge_attribution", "receiver_grads"]

"""A NodeScores of a 3-layer GQA model (6 heads in 2 K/V groups and an MLP per layer) with a
model name holding markup, for the node display's tests."""

from __future__ import annotations

from display_samples import XSS

from headlab.results.node_scores import NodeScores

LAYERS, HEADS, GROUPS = 3, 6, 2


def node_scores() -> NodeScores:
    """Every node scored with a distinct value: head (l, h) -> (-1)^h (l + 1) (h + 1) / 7, group
    (l, g) -> 0.3 (g + 1) - l, MLP l -> 2.5 (l - 1); the strongest is head 2.5 (-18/7), the
    weakest group 0.g0 (0.3)."""
    nodes, scores = [], []
    for layer in range(LAYERS):
        for head in range(HEADS):
            nodes.append(f"{layer}.{head}")
            scores.append((-1) ** head * (layer + 1) * (head + 1) / 7)
        for group in range(GROUPS):
            nodes.append(f"{layer}.g{group}")
            scores.append(0.3 * (group + 1) - layer)
        nodes.append(f"mlp.{layer}")
        scores.append(2.5 * (layer - 1))
    return NodeScores(
        model=f"tiny {XSS}",
        method="head-patching",
        metric="logprob",
        nodes=nodes,
        scores=scores,
        clean_metric=-2.0,
        corrupted_metric=-9.0,
        heads_per_layer=[HEADS] * LAYERS,
        kv_heads_per_layer=[GROUPS] * LAYERS,
        task="induction",
    )

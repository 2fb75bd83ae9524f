"""What ``headlab circuits`` prints for a node method: the model's performance on the task, the
``top`` nodes by |score| (with ``--by-position``, each one's strongest position), and what the
score means."""

from __future__ import annotations

import textwrap

from rich.text import Text

from headlab.cli.tables import fitted_tables
from headlab.results.node_scores import NodeScores, parse_node

KINDS = {"head": "head", "group": "K/V group", "mlp": "MLP"}
MEANS = {
    "nodes": "first-order change",
    "nodes-ig": "integrated-gradients estimate of the change",
    "head-patching": "change",
}


def node_lines(result: NodeScores, top: int) -> list:
    """Rich renderables, in order, each within 80 columns."""
    lines: list = []
    performance = result.performance
    if performance is not None:
        lines.append(Text(textwrap.fill(performance.says(), 80)))
        if not performance.does_task:
            lines.append(
                Text(
                    textwrap.fill(
                        f"warning: {result.model} does not do {result.task}; scores of a behaviour "
                        "the model lacks explain little",
                        80,
                    )
                )
            )
    index = {name: i for i, name in enumerate(result.nodes)}
    rows = []
    for rank, (node, score) in enumerate(result.top(top), start=1):
        parsed = parse_node(node)
        row = [str(rank), node, KINDS[parsed[0]] if parsed else "-", f"{score:+.4g}"]
        if result.by_position is not None:
            values = result.by_position[index[node]]
            best = max(range(len(values)), key=lambda p: abs(values[p]))
            row += [str(best), f"{values[best]:+.4g}"]
        rows.append(row)
    columns = ["#", "node", "kind", "score"]
    if result.by_position is not None:
        columns += ["position", "alone"]
    steps = f" (m={result.steps})" if result.steps else ""
    title = f"Top {len(rows)} of {len(result.nodes)} nodes, {result.method}{steps}"
    title += f", {result.task}" if result.task else ""
    lines += fitted_tables(title, columns, rows, keys=1, left=["node", "kind"])
    alone = (
        "; alone: the same at the position where it is largest"
        if result.by_position is not None
        else ""
    )
    lines.append(
        Text(
            textwrap.fill(
                f"score: {MEANS.get(result.method, 'change')} in {result.metric} when the node's "
                f"output comes from the corrupted run (clean {result.clean_metric:.4g}, corrupted "
                f"{result.corrupted_metric:.4g}){alone}",
                80,
            )
        )
    )
    return lines


__all__ = ["node_lines"]

"""Scores of a model's nodes (its heads, K/V groups and MLPs) on clean/corrupted pairs: node
attribution (``circuits.node_attribution``) or the patching sweep (``circuits.head_patching``).

``NodeScores`` (KIND "circuit-nodes"): one score per node, named in the graph's vocabulary
(``L.H`` a query head, ``L.gG`` a K/V group of a GQA layer, ``mlp.L`` an MLP), each the change in
the metric when that node's output (a group's: its keys and values) comes from the corrupted
run while everything else is clean: exactly (``head-patching``, one patched run per node) or to
first order (``nodes``: gradient times the change; ``nodes-ig``: the gradient averaged over
inputs from the corrupted to the clean one). ``by_position`` (node x position), when measured,
splits each score by the position patched. Plain data: ``to_dict`` and a validating ``from_dict``
whose sizes are checked against what the document holds; no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from headlab.results.circuit_tasks import TaskPerformance
from headlab.results.schema import Fields, is_int, problem

#: nodes: attribution patching (one forward, one backward); nodes-ig: its integrated-gradients
#: variant on the inputs; head-patching: one exact patched run per node (per node x position).
NODE_METHODS = ("nodes", "nodes-ig", "head-patching")
_HEAD = re.compile(r"(\d+)\.(\d+)")
_GROUP = re.compile(r"(\d+)\.g(\d+)")
_MLP = re.compile(r"mlp\.(\d+)")


def parse_node(name: str) -> tuple[str, int, int] | None:
    """("head" | "group" | "mlp", layer, index) of a node's name; None for anything else."""
    for kind, pattern in (("head", _HEAD), ("group", _GROUP), ("mlp", _MLP)):
        found = pattern.fullmatch(name)
        if found is not None:
            return kind, int(found.group(1)), int(found.group(2)) if kind != "mlp" else 0
    return None


@dataclass(frozen=True)
class NodeScores:
    """``model``'s nodes scored by ``method`` (``NODE_METHODS``; ``steps``: nodes-ig's m,
    else None) on ``metric``: ``nodes`` and their ``scores`` (metric units: the patched run's
    metric minus the clean run's), the metric on the clean and the corrupted runs, the model's
    ``heads_per_layer`` and ``kv_heads_per_layer``, ``by_position`` (one row per node, one
    column per position; None when not measured), and, from ``headlab circuits``, the ``task``
    and the model's ``performance`` on it."""

    KIND = "circuit-nodes"

    model: str
    method: str
    metric: str
    nodes: list[str]
    scores: list[float]
    clean_metric: float
    corrupted_metric: float
    heads_per_layer: list[int]
    kv_heads_per_layer: list[int]
    by_position: list[list[float]] | None = None
    steps: int | None = None
    task: str | None = None
    performance: TaskPerformance | None = None

    def __post_init__(self) -> None:
        if len(self.nodes) != len(self.scores):
            raise ValueError(
                f"nodes and scores must have one length, got {len(self.nodes)} "
                f"and {len(self.scores)}"
            )

    def top(self, n: int) -> list[tuple[str, float]]:
        """The ``n`` nodes of largest |score|, largest first (ties in the nodes' order)."""
        order = sorted(range(len(self.nodes)), key=lambda i: (-abs(self.scores[i]), i))
        return [(self.nodes[i], self.scores[i]) for i in order[:n]]

    def score(self, node: str) -> float:
        """The score of ``node`` (KeyError naming it when it was not scored)."""
        try:
            return self.scores[self.nodes.index(node)]
        except ValueError:
            raise KeyError(f"no node {node!r} among the {len(self.nodes)} scored") from None

    def __repr__(self) -> str:
        """One line, however many nodes: what ran, and the strongest node."""
        top = self.top(1)
        best = f"; strongest {top[0][0]} {top[0][1]:+.3g}" if top else ""
        where = "" if self.by_position is None else f" x {len(self.by_position[0])} positions"
        return (
            f"NodeScores({self.model!r}, {self.method}, {self.metric}: "
            f"{len(self.nodes)} nodes{where}{best})"
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "method": self.method,
            "metric": self.metric,
            "nodes": list(self.nodes),
            "scores": list(self.scores),
            "clean_metric": self.clean_metric,
            "corrupted_metric": self.corrupted_metric,
            "heads_per_layer": list(self.heads_per_layer),
            "kv_heads_per_layer": list(self.kv_heads_per_layer),
            "by_position": None
            if self.by_position is None
            else [list(r) for r in self.by_position],
            "steps": self.steps,
            "task": self.task,
            "performance": None if self.performance is None else self.performance.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = KIND) -> NodeScores:
        fields = Fields(data, where)
        method = fields.str("method")
        if method not in NODE_METHODS:
            raise problem(fields.at("method"), f"one of {', '.join(NODE_METHODS)}", method)
        steps = fields.data.get("steps")
        if steps is not None and (not is_int(steps) or steps < 1):
            raise problem(fields.at("steps"), "an integer >= 1 or null", steps)
        nodes = fields.strings("nodes", nonempty=True)
        scores = fields.numbers("scores")
        if len(scores) != len(nodes):
            raise problem(fields.at("scores"), f"{len(nodes)} numbers (one per node)", scores)
        heads, kv_heads = _shapes(fields, nodes)
        by_position = None
        if fields.data.get("by_position") is not None:
            rows = fields.list("by_position")
            if len(rows) != len(nodes):
                raise problem(
                    fields.at("by_position"),
                    f"{len(nodes)} rows (one per node)",
                    f"{len(rows)} rows",
                )
            by_position = fields.grid("by_position")
            width = len(by_position[0])
            for i, row in enumerate(by_position):
                if len(row) != width or not row:
                    raise problem(
                        f"{fields.at('by_position')}[{i}]",
                        f"{max(width, 1)} numbers (one per position)",
                        row,
                    )
        task = None if fields.data.get("task") is None else fields.name("task")
        performance = None
        if fields.data.get("performance") is not None:
            performance = TaskPerformance.from_dict(
                fields.object("performance").data, fields.at("performance")
            )
        return cls(
            model=fields.name("model"),
            method=method,
            metric=fields.name("metric"),
            nodes=nodes,
            scores=scores,
            clean_metric=fields.number("clean_metric"),
            corrupted_metric=fields.number("corrupted_metric"),
            heads_per_layer=heads,
            kv_heads_per_layer=kv_heads,
            by_position=by_position,
            steps=steps,
            task=task,
            performance=performance,
        )


def _shapes(fields: Fields, nodes: list) -> tuple[list[int], list[int]]:
    """The layer shapes, checked against the nodes the file holds: as many layers as the nodes
    name, each layer's head count the heads it names (every head is scored), its K/V count
    dividing it, and where its groups are named (GQA), their count."""
    heads: dict[int, set[int]] = {}
    groups: dict[int, set[int]] = {}
    for i, name in enumerate(nodes):
        parsed = parse_node(name) if isinstance(name, str) else None
        if parsed is None:
            raise problem(f"{fields.at('nodes')}[{i}]", "a node name (L.H, L.gG or mlp.L)", name)
        kind, layer, index = parsed
        heads.setdefault(layer, set())
        if kind != "mlp":
            (heads if kind == "head" else groups).setdefault(layer, set()).add(index)
    if len(set(nodes)) != len(nodes):
        raise problem(fields.at("nodes"), "distinct names", nodes)
    counts = fields.list("heads_per_layer", nonempty=True)
    kv_counts = fields.list("kv_heads_per_layer", nonempty=True)
    if len(counts) != len(heads) or max(heads) != len(heads) - 1:
        raise problem(
            fields.at("heads_per_layer"), f"{len(heads)} layers (those its nodes name)", counts
        )
    if len(kv_counts) != len(counts):
        raise problem(fields.at("kv_heads_per_layer"), f"{len(counts)} counts", kv_counts)
    for layer, (count, kv) in enumerate(zip(counts, kv_counts, strict=True)):
        named = heads[layer]
        if not named or named != set(range(len(named))) or count != len(named):
            raise problem(
                f"{fields.at('heads_per_layer')}[{layer}]",
                f"{len(named)} (the heads its nodes name in layer {layer})",
                count,
            )
        at = f"{fields.at('kv_heads_per_layer')}[{layer}]"
        if not is_int(kv) or kv < 1 or count % kv:
            raise problem(at, f"a count dividing {count} (the layer's heads)", kv)
        grouped = groups.get(layer, set())
        if grouped and (grouped != set(range(kv)) or kv == count):
            raise problem(
                at, f"{len(grouped)} (the K/V groups its nodes name in layer {layer})", kv
            )
    return counts, kv_counts


__all__ = ["NODE_METHODS", "NodeScores", "parse_node"]

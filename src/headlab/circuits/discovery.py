"""Circuits from edge scores: the top-n edges, or EAP-IG's greedy growth from the logits.

A circuit is a set of edges (graph.py names). ``top_edges`` takes the n edges of largest
|score|. ``greedy_edges`` grows a connected circuit backwards from the logits (Hanna et al.
2024's greedy search): the candidates are the edges into nodes already in the circuit (at first
the logits; a head once it sends into the circuit, with its K/V group's k and v inputs; an MLP
likewise), and the largest |score| among them joins, n times.
"""

from __future__ import annotations

import heapq

from headlab.circuits.graph import LOGITS, Graph
from headlab.results.circuit_edges import EdgeScores


def check_size(n: int, edges: int) -> None:
    """ValueError unless 0 <= n <= edges."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= edges:
        raise ValueError(f"n must be an integer in 0..{edges} (the scored edges), got {n!r}")


def top_edges(scores: EdgeScores, n: int) -> list[str]:
    """The ``n`` edges of largest |score|, largest first (ties in the scores' order)."""
    check_size(n, len(scores.edges))
    return [edge for edge, _ in scores.top(n)]


def greedy_edges(scores: EdgeScores, graph: Graph, n: int) -> list[str]:
    """``n`` edges grown from the logits (see the module docstring), in the order they joined.
    Stops early when no scored edge reaches the circuit any more."""
    check_size(n, len(scores.edges))
    score = dict(zip(scores.edges, scores.scores, strict=True))
    into: dict[str, list[str]] = {}
    for edge in graph.edges:
        if edge.name in score:
            into.setdefault(edge.receiver, []).append(edge.name)
    chosen: list[str] = []
    reached: set[str] = set()
    frontier: list[tuple[float, int, str]] = []
    order = {name: i for i, name in enumerate(scores.edges)}

    def reach(node: str) -> None:
        receivers = [node]
        found = graph.node(node)
        if found.kind == "head":
            receivers.append(graph.kv_receiver(found.layer, found.index))
        for receiver in receivers:
            if receiver in reached:
                continue
            reached.add(receiver)
            for name in into.get(receiver, ()):
                heapq.heappush(frontier, (-abs(score[name]), order[name], name))

    reach(LOGITS)
    while frontier and len(chosen) < n:
        _, _, name = heapq.heappop(frontier)
        chosen.append(name)
        reach(graph.edge(name).sender)
    return chosen


__all__ = ["check_size", "greedy_edges", "top_edges"]

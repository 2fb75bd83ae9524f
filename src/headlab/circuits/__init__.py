"""How heads compose across layers: the graph of a model (graph.py), weight-based composition,
exact path patching, edge attribution (EAP, EAP-IG), circuit discovery and faithfulness.

The public names below are imported from their modules on first use (PEP 562), so that
``from headlab.circuits import Patcher`` works and ``import headlab.circuits`` stays cheap:

    run a whole study   CircuitRequest, TaskRequest, prepare, run_circuits (as ``headlab
                        circuits`` does)
    the graph           graph_of (a model's graph), Graph, LayerShape, Edge, Node
    weights only        composition_scores, random_baseline
    exact patching      Patcher, path_patching
    attribution         edge_attribution (EAP, EAP-IG)
    circuits            top_edges, greedy_edges, faithfulness_curve, agreement
    metrics             Metric, logit_difference, answer_logprob, next_token_logprob,
                        kl_to_clean, custom_metric (a function of your own)
    tasks               build_pairs, task_metric

(``faithfulness`` and ``task_performance`` share their modules' names, which the package's
attributes are once those modules are imported: take them from ``headlab.circuits.faithfulness``
and ``headlab.circuits.task_performance``.)
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "CircuitRequest": "run",
    "prepare": "run",
    "run_circuits": "run",
    "TaskRequest": "tasks",
    "TaskPairs": "tasks",
    "build_pairs": "tasks",
    "task_metric": "task_performance",
    "graph_of": "blocks",
    "Graph": "graph",
    "LayerShape": "graph",
    "Edge": "graph",
    "Node": "graph",
    "composition_scores": "composition",
    "random_baseline": "composition",
    "Patcher": "patching",
    "path_patching": "patching",
    "edge_attribution": "attribution",
    "top_edges": "discovery",
    "greedy_edges": "discovery",
    "faithfulness_curve": "faithfulness",
    "agreement": "score_agreement",
    "Metric": "metrics",
    "custom_metric": "metrics",
    "logit_difference": "metrics",
    "answer_logprob": "metrics",
    "next_token_logprob": "metrics",
    "kl_to_clean": "metrics",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:  # a submodule (headlab.circuits.graph) is imported as a module
        raise AttributeError(f"module 'headlab.circuits' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"headlab.circuits.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

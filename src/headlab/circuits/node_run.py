"""A ``headlab circuits`` run of a node method (``NODE_METHODS``): the task's pairs, the model's own
performance on them, then every head, K/V group and MLP scored by node attribution ("nodes",
"nodes-ig": node_attribution.py) or by the patching sweep ("head-patching": head_patching.py).

    CircuitRequest(..., method="nodes")   checks the options (no model)
    prepare(model, request)               the pairs and the nodes (run.py; no forward yet)
    run_nodes(model, prepared)            performance, scores -> ``NodeScores``
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from headlab.circuits.run import Prepared, Step, _stage
from headlab.results.node_scores import NODE_METHODS, NodeScores


def run_nodes(
    model,
    prepared: Prepared,
    on_step: Step | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> NodeScores:
    """The run of the module docstring. ``on_stage(name)`` when a stage starts ("performance",
    "scores"), ``on_step(done, total)`` within it (the runs)."""
    from headlab.circuits.task_performance import task_metric, task_performance

    request, pairs = prepared.request, prepared.pairs
    if request.method not in NODE_METHODS:
        raise ValueError(f"method must be one of {', '.join(NODE_METHODS)}, got {request.method!r}")
    with _stage(on_stage, "performance"):
        performance = task_performance(model, pairs)
    metric = task_metric(pairs)
    with _stage(on_stage, "scores"):
        if request.method == "head-patching":
            from headlab.circuits.head_patching import head_patching

            scores = head_patching(
                model,
                pairs.clean,
                pairs.corrupted,
                metric,
                by_position=request.by_position,
                progress=on_step,
            )
        else:
            from headlab.circuits.node_attribution import node_attribution

            scores = node_attribution(
                model,
                pairs.clean,
                pairs.corrupted,
                metric,
                method=request.method,
                steps=request.steps,
                by_position=request.by_position,
                progress=on_step,
            )
    return dataclasses.replace(scores, task=pairs.task, performance=performance)


__all__ = ["run_nodes"]

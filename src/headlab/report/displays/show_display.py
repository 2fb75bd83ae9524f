"""Which display shows which results type, for ``show`` and for IPython's rich display.

``BUILDERS`` maps a results type (module, class name) to the function that makes its
``Display``; a new results type gets its display by one entry here and one drawer in
``static/displays.js`` (``headlabDisplays.kinds``). ``register_formatters`` tells a running
IPython to show each results type through its display (``headlab``'s import does it when a kernel
runs), so the results types stay plain data that import nothing of the report.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from headlab.report.displays.display_bundle import Display

#: (module, class) of a results type -> (module, function) making its Display.
BUILDERS: dict[tuple[str, str], tuple[str, str]] = {
    ("headlab.results.head_statistics", "HeadStatistics"): (
        "headlab.report.displays.heads_display",
        "heads_display",
    ),
    ("headlab.results.head_pattern_result", "HeadPattern"): (
        "headlab.report.displays.heads_display",
        "pattern_display",
    ),
    ("headlab.results.long_context_result", "LongContextResult"): (
        "headlab.report.displays.roles_display",
        "roles_display",
    ),
    ("headlab.results.kv_budget_result", "KVBudgetResult"): (
        "headlab.report.displays.roles_display",
        "kv_budget_display",
    ),
    ("headlab.results.circuit_run", "CircuitRun"): (
        "headlab.report.displays.circuit_display",
        "circuit_display",
    ),
    ("headlab.results.circuit_edges", "FaithfulnessCurve"): (
        "headlab.report.displays.circuit_display",
        "curve_display",
    ),
    ("headlab.results.score_split_result", "ScoreSplitResult"): (
        "headlab.report.displays.score_split_display",
        "score_split_display",
    ),
    ("headlab.results.pairs_over_queries_result", "PairsOverQueriesResult"): (
        "headlab.report.displays.pairs_over_queries_display",
        "pairs_over_queries_display",
    ),
    ("headlab.results.node_scores", "NodeScores"): (
        "headlab.report.displays.node_display",
        "node_display",
    ),
    ("headlab.results.stream_heads", "EncoderDecoderHeads"): (
        "headlab.report.displays.kinds_display",
        "cross_display",
    ),
    ("headlab.results.stream_heads", "VisionHeads"): (
        "headlab.report.displays.kinds_display",
        "patch_grid_display",
    ),
}


def _builder(result: object) -> Callable[..., Display]:
    for cls in type(result).__mro__:
        where = BUILDERS.get((cls.__module__, cls.__qualname__))
        if where is not None:
            return getattr(importlib.import_module(where[0]), where[1])
    shown = ", ".join(name for _, name in BUILDERS)
    raise TypeError(
        f"expected a results type with a display ({shown}), got {type(result).__name__}"
    )


def show(result: object, **options: Any) -> Display:
    """The display of ``result`` (a results type of ``BUILDERS``), with the options its builder
    takes (``threshold`` for a circuit, ``metric`` for head statistics, ``pair`` for a
    score split). In a notebook, the last
    expression of a cell shows it; ``Display.html()`` is its HTML. TypeError for another type."""
    return _builder(result)(result, **options)


def _html(result: object) -> str:
    return show(result)._repr_html_()


def register_formatters(shell: Any) -> None:
    """Show every results type of ``BUILDERS`` through its display in IPython ``shell``, by name:
    the results modules are not imported until one of their objects is shown."""
    formatter = shell.display_formatter.formatters["text/html"]
    for module, name in BUILDERS:
        formatter.for_type_by_name(module, name, _html)

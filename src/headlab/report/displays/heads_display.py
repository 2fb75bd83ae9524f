"""Displays of what each head does: head statistics (a layers x heads heatmap and a sortable
table) and one head's pattern over a text (an overview, exact tiles to zoom into, hover)."""

from __future__ import annotations

from headlab.report.displays.display_bundle import Display
from headlab.results.head_pattern_result import HeadPattern
from headlab.results.head_statistics import HeadStatistics


def heads_display(stats: HeadStatistics, *, metric: str | None = None) -> Display:
    """Every statistic (and detector score) of every head; ``metric`` is shown first (default:
    the first statistic). ValueError for a metric the statistics do not have."""
    names = [*stats.metrics, *stats.detectors]
    if metric is not None and metric not in names:
        raise ValueError(f"metric must be one of {', '.join(names)}, got {metric!r}")
    data = stats.to_dict()
    data["first"] = metric or names[0]
    return Display("heads", data, repr(stats), "display-heads")


def pattern_display(pattern: HeadPattern) -> Display:
    """One head over its text: the overview, and the exact weights the pattern kept (every
    weight at or above its floor), which the page unpacks tile by tile as the view reaches it."""
    data = pattern.to_dict()
    data["kept"] = pattern.kept
    return Display("pattern", data, repr(pattern), "display-pattern")

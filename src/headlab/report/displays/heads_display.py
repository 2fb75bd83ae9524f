"""Displays of what each head does: head statistics (a layers x heads heatmap and a sortable
table) and one head's pattern over a text (an overview, exact tiles to zoom into, hover)."""

from __future__ import annotations

from headlab.report.displays.display_bundle import Display
from headlab.results.head_pattern_result import HeadPattern
from headlab.results.head_statistics import HeadStatistics

#: The detectors in the order a reader looks for them: the induction circuit's two heads first.
DETECTOR_ORDER = ("induction", "previous_token", "duplicate_token")


def heads_display(
    stats: HeadStatistics, *, metric: str | None = None, roles: list[list[str]] | None = None
) -> Display:
    """Every detector score (on one 0-1 scale, induction first) and statistic (each on its own
    scale) of every head; ``metric`` is shown first (default: the induction detector where the
    statistics have it, else the first statistic). ``roles``: each head's role on a long text
    (``LongContextResult.roles.roles``, (layer, head) names), one more choice and column.
    ValueError for a metric the statistics do not have, or roles of another shape."""
    detectors = sorted(
        stats.detectors,
        key=lambda n: DETECTOR_ORDER.index(n) if n in DETECTOR_ORDER else len(DETECTOR_ORDER),
    )
    names = [*detectors, *stats.metrics]
    if metric is not None and metric not in names:
        raise ValueError(f"metric must be one of {', '.join(names)}, got {metric!r}")
    if roles is not None:
        shape = [len(row) for row in roles]
        wanted = [len(row) for row in next(iter(stats.metrics.values()))]
        if shape != wanted:
            raise ValueError(
                f"roles must have the statistics' shape ({len(wanted)} layers x {max(wanted)} "
                f"heads), got {len(shape)} layers x {max(shape, default=0)} heads"
            )
    data = stats.to_dict()
    data["detectors"] = {name: stats.detectors[name] for name in detectors}
    data["first"] = metric or names[0]
    data["roles"] = roles
    return Display("heads", data, repr(stats), "display-heads")


def pattern_display(pattern: HeadPattern) -> Display:
    """One head over its text: the overview, and the exact weights the pattern kept (every
    weight at or above its floor), which the page unpacks tile by tile as the view reaches it."""
    data = pattern.to_dict()
    data["kept"] = pattern.kept
    return Display("pattern", data, repr(pattern), "display-pattern")

"""The display of one head's pair matrix over all its queries (``PairsOverQueriesResult``,
``headlab why-attends --all-queries``): the summed pair matrix as a heatmap, its two marginals as
bars (the score split's drawers), and where each query attends: a point per query at (query
position, attended key), coloured by its raw score."""

from __future__ import annotations

from headlab.report.displays.display_bundle import Display
from headlab.results.pairs_over_queries_result import PairsOverQueriesResult

#: Bars per side.
BARS = 10


def pairs_over_queries_display(result: PairsOverQueriesResult) -> Display:
    """``result`` drawn whole; the text's tokens travel for the points' tooltips."""
    data = result.to_dict()
    data["total"] = result.total
    data["at_first"], data["at_themselves"] = result.at_first, result.at_themselves
    data["bars"] = BARS
    return Display("pairs-over-queries", data, repr(result), "display-pairs-over-queries")

"""The display of a score split (``ScoreSplitResult``, ``headlab why-attends``): for one
(query, key) pair at a time, the pair matrix as a heatmap (query-side x key-side components),
its two marginals as bars, and each split head's key-side term on the text, by the source token
it read. The report's "why a head attends" part shows the same display."""

from __future__ import annotations

from headlab.report.displays.display_bundle import Display
from headlab.results.score_split_result import PairSplit, ScoreSplitResult

#: Bars per side.
BARS = 10


def strongest_pair(result: ScoreSplitResult) -> PairSplit:
    """The pair with the highest score (the highest q.k where scores were not read)."""
    return max(result.pairs, key=lambda p: p.raw if p.score is None else p.score)


def score_split_display(result: ScoreSplitResult, *, pair: int | None = None) -> Display:
    """Every pair of ``result``, ``pair`` (an index into ``result.pairs``) first; default the
    strongest. ValueError for a result without pairs or a pair index out of range."""
    if not result.pairs:
        raise ValueError("expected a score split with at least one pair, got none")
    if pair is not None and not 0 <= pair < len(result.pairs):
        raise ValueError(f"pair must be between 0 and {len(result.pairs) - 1}, got {pair}")
    data = result.to_dict()
    data["first"] = result.pairs.index(strongest_pair(result)) if pair is None else pair
    data["bars"] = BARS
    return Display("score-split", data, repr(result), "display-score-split")

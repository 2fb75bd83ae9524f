"""The report's "Why a head attends where it does" part: read ``headlab why-attends``' results
file, show it through the notebook's display (pair heatmap, marginals, source tokens:
``report.displays.score_split_display``), say what its strongest pair's largest terms are, and
draw its figure for the figures folder. Measures nothing; the template escapes every text."""

from __future__ import annotations

from pathlib import Path

from headlab.report.displays import show
from headlab.report.displays.score_split_display import strongest_pair
from headlab.report.figures import png_bytes
from headlab.report.reading import Skipped, skipping
from headlab.report.score_split_figures import score_split_figure
from headlab.results.json_store import read_result
from headlab.results.score_split_result import ScoreSplitResult

FILE = "why_attends.json"
COMMAND = "headlab why-attends --model smollm2 --layer 9 --head 0 --keys induction"


def score_split_section(directory: Path, pngs: dict[str, bytes], *, figures: bool = True) -> dict:
    """The part's title, sentence and display (its figure into ``pngs`` when ``figures``: the
    page shows the display alone); or {missing: command,
    file} (and skipped: why, for a file that breaks its schema)."""
    path = Path(directory) / FILE
    part = skipping(path, lambda: _part(path, pngs, figures))
    if part is None or isinstance(part, Skipped):
        missing = part.part(COMMAND) if part else {"missing": COMMAND, "file": str(path)}
        return {"title": "Why a head attends where it does", **missing}
    return part


def _part(path: Path, pngs: dict[str, bytes], figures: bool) -> dict | None:
    result = read_result(path, ScoreSplitResult)
    if result is None or not result.pairs:
        return None
    if figures:
        try:
            pngs["why_attends.png"] = png_bytes(score_split_figure(result))
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: not a why-attends results file ({error})") from None
    pair = strongest_pair(result)
    tokens = result.tokens[pair.batch]
    names = result.key_names()
    order = sorted(range(len(names)), key=lambda c: -abs(pair.key_marginal[c]))
    top = names[order[0]]
    said = (
        f"Query {pair.query} ({tokens[pair.query]!r}) to key {pair.key} "
        f"({result.key_labels(pair.batch)[pair.key]!r}): q.k = {pair.raw:.4g}; "
        "the key side's largest term is "
        f"{top}'s ({pair.key_marginal[order[0]]:+.4g})."
    )
    if pair.sources:
        source = pair.sources[0]
        best = max(zip(source.positions, source.values, strict=True), key=lambda x: x[1])
        said += (
            f" Head {source.component} adds {sum(source.values):+.4g} to the key side, "
            f"most through the token it read at {best[0]} "
            f"({result.key_labels(pair.batch)[best[0]]!r}, "
            f"{best[1]:+.4g})."
        )
    return {
        "title": f"Why head {result.layer}.{result.head} of {result.model} attends where it "
        f"does ({result.keys} keys, {len(result.pairs)} pairs)",
        "answer": said,
        "display": show(result).html(),
        "command": COMMAND,
    }


__all__ = ["score_split_section"]

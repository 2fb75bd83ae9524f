"""The report's part on one head over all its queries: read ``headlab why-attends
--all-queries``' results file (``PairsOverQueriesResult``), draw its figure (the pair matrix
summed over the queries, both marginals, where each query attends), list its strongest pairs,
and say in a sentence what the key side reads most. Measures nothing; the template escapes
every text."""

from __future__ import annotations

import base64
from pathlib import Path

from headlab.report import figures
from headlab.report.pairs_over_queries_figures import pairs_over_queries_figure
from headlab.report.reading import Skipped, skipping
from headlab.results.json_store import read_result
from headlab.results.pairs_over_queries_result import PairsOverQueriesResult

FILE = "why_attends_all_queries.json"
COMMAND = "headlab why-attends --model smollm2 --layer 20 --head 6 --all-queries --length 4096"
TITLE = "One head over all its queries"
#: Rows of the strongest pairs' table.
ROWS = 8


def pairs_over_queries_section(directory: Path, pngs: dict[str, bytes]) -> dict:
    """The part: title, sentence, figure (also into ``pngs``), the strongest pairs, command;
    or {missing: command, file} (and skipped: why, for a file that breaks its schema)."""
    path = Path(directory) / FILE
    part = skipping(path, lambda: _part(path, pngs))
    if part is None or isinstance(part, Skipped):
        missing = part.part(COMMAND) if part else {"missing": COMMAND, "file": str(path)}
        return {"title": TITLE, **missing}
    return part


def _part(path: Path, pngs: dict[str, bytes]) -> dict | None:
    result = read_result(path, PairsOverQueriesResult)  # ValueError naming the file and field
    if result is None:
        return None
    try:
        png = figures.png_bytes(pairs_over_queries_figure(result))
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise ValueError(
            f"{path}: not a why-attends --all-queries results file ({error})"
        ) from None
    pngs["why_attends_all_queries.png"] = png
    total = result.total
    order = sorted(range(len(result.components)), key=lambda c: -abs(result.key_marginal[c]))
    tops = ", ".join(f"{result.components[c]} {result.key_marginal[c]:+.5g}" for c in order[:3])
    said = (
        f"Over {len(result.keys)} queries, each at the key it attends, q.k sums to {total:.5g}. "
        f"The key side's largest terms: {tops}. "
        f"{result.at_first} queries attend the first position."
    )
    return {
        "title": f"{TITLE}: head {result.layer}.{result.head} of {result.model}",
        "answer": said,
        "text": result.text,
        "rows": [
            {"query": q, "key": k, "value": f"{v:+.5g}", "share": _share(v, total)}
            for q, k, v in result.strongest[:ROWS]
        ],
        "image": "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
        "command": COMMAND,
    }


def _share(value: float, total: float) -> str:
    return f"{value / total:+.3f}" if total else "n/a"


__all__ = ["pairs_over_queries_section"]

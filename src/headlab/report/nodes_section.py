"""The report's part on node scores: read ``headlab circuits --method nodes | nodes-ig |
head-patching``'s results file and show its display (``report/displays/node_display.py``: every
head, K/V group and MLP on a grid, the strongest in a table). The report measures nothing
itself; the display writes every text as text."""

from __future__ import annotations

from pathlib import Path

from headlab.report.displays import show
from headlab.report.reading import Skipped, skipping
from headlab.results.json_store import read_result
from headlab.results.node_scores import NodeScores

FILE = "circuit_nodes.json"
COMMAND = "headlab circuits --model smollm2 --task induction --method head-patching"


def nodes_section(directory: Path) -> dict:
    """The part: its title, the model's performance on the task, the display's HTML and the
    command; or {missing: command, file} (and skipped: why, for a file that breaks its
    schema)."""
    path = Path(directory) / FILE
    part = skipping(path, lambda: _part(path))
    if isinstance(part, Skipped):
        return {"title": "Node scores", **part.part(COMMAND)}
    if part is None:
        return {"title": "Node scores", "missing": COMMAND, "file": str(path)}
    return part


def _part(path: Path) -> dict | None:
    result = read_result(path, NodeScores)  # ValueError naming the file and the field
    if result is None:
        return None
    steps = f" (m={result.steps})" if result.steps else ""
    task = f"{result.task} in " if result.task else ""
    return {
        "title": f"Node scores: {task}{result.model}, by {result.method}{steps}",
        "performance": None if result.performance is None else result.performance.says(),
        "display": show(result).html(),
        "command": COMMAND,
    }

"""The report's "Circuits" section: read ``headlab circuits``' results file, draw its figures
(the circuit on the graph, the faithfulness curve) and list its top edges. The report measures
nothing itself; the page's template escapes every text (the model's name, a task's edges)."""

from __future__ import annotations

import base64
from pathlib import Path

from headlab.report import figures
from headlab.report.circuit_figures import circuit_graph_figure, faithfulness_figure
from headlab.report.displays import show
from headlab.report.formation_section import formation_section
from headlab.report.reading import Skipped, skipping
from headlab.results.circuit_run import CircuitRun
from headlab.results.json_store import read_result

FILE = "circuits.json"
COMMAND = "headlab circuits --model smollm2 --task induction --method eap"


def _image(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def circuits_sections(directory: Path, pngs: dict[str, bytes]) -> dict:
    """{"circuits": part, "formation": part}: the circuits part's title, performance line, top
    edges, figures and command; or {missing: command, file} (and skipped: why, for a file that
    breaks its schema); the formation part (``report/formation_section.py``)."""
    path = Path(directory) / FILE
    part = skipping(path, lambda: _part(path, pngs))
    if part is None or isinstance(part, Skipped):
        missing = part.part(COMMAND) if part else {"missing": COMMAND, "file": str(path)}
        part = {"title": "Circuits", **missing}
    return {"circuits": part, "formation": formation_section(Path(directory), pngs)}


def _part(path: Path, pngs: dict[str, bytes]) -> dict | None:
    result = read_result(path, CircuitRun)  # ValueError naming the file and the field
    if result is None:
        return None
    try:
        graph = figures.png_bytes(circuit_graph_figure(result))
        curve = None
        if result.faithfulness is not None:
            curve = figures.png_bytes(faithfulness_figure(result))
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a circuits results file ({error})") from None
    pngs["circuits.png"] = graph
    if curve is not None:
        pngs["circuits_faithfulness.png"] = curve
    rows = []
    for rank, (edge, score) in enumerate(result.top_edges(), start=1):
        sender, rest = edge.split("->", 1)
        receiver, _, input_ = rest.partition("<")
        rows.append({"rank": rank, "sender": sender, "receiver": receiver,
                     "input": input_.rstrip(">") or "in", "score": f"{score:+.4g}"})  # fmt: skip
    steps = f" (m={result.steps})" if result.steps else ""
    found = result.faithfulness
    return {
        "title": f"Circuits: {result.task} in {result.model}, by {result.method}{steps}",
        "performance": result.performance.says(),
        "does_task": result.performance.does_task,
        "edges": len(result.scores.edges),
        "rows": rows,
        "image": _image(graph),
        "curve": None if curve is None else _image(curve),
        "cpr": None if found is None else f"{found.cpr:.3f}",
        "cmd": None if found is None else f"{found.cmd:.3f}",
        "command": COMMAND,
        # the notebook's displays of the same result: every edge with a threshold, the curve
        "display": show(result).html(),
        "curve_display": None if found is None else show(found).html(),
    }


__all__ = ["circuits_sections"]

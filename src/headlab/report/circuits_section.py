"""The report's "Circuits" section: read ``headlab circuits``' results file and show it through
the notebook's displays (every edge on the graph with its threshold and the table of the
strongest edges drawn; the faithfulness curve), with sentences from its numbers; its figures go
to the figures folder. The report measures nothing itself; the displays write every text (the
model's name, a task's edges) as text."""

from __future__ import annotations

from pathlib import Path

from headlab.report.circuit_figures import circuit_graph_figure, faithfulness_figure
from headlab.report.displays import show
from headlab.report.figures import png_bytes
from headlab.report.formation_section import formation_section
from headlab.report.nodes_section import nodes_section
from headlab.report.pairs_over_queries_section import pairs_over_queries_section
from headlab.report.reading import Skipped, skipping
from headlab.report.score_split_section import score_split_section
from headlab.results.circuit_run import CircuitRun
from headlab.results.json_store import read_result

FILE = "circuits.json"
COMMAND = "headlab circuits --model smollm2 --task induction --method eap"


def circuits_sections(directory: Path, pngs: dict[str, bytes], *, figures: bool = True) -> dict:
    """{"circuits": part, "formation": part, "attends": part, "attends_all": part, "nodes":
    part}: the circuits part's title, performance line, displays and command, or {missing:
    command, file} (and skipped: why, for a file that breaks its schema); the formation part
    (``report/formation_section.py``), the score split's (``report/score_split_section.py``),
    one head's over all its queries (``report/pairs_over_queries_section.py``) and the node
    scores' (``report/nodes_section.py``). The circuit's and the score split's
    figures go to ``pngs`` when ``figures`` (the page shows their displays alone)."""
    path = Path(directory) / FILE
    part = skipping(path, lambda: _part(path, pngs, figures))
    if part is None or isinstance(part, Skipped):
        missing = part.part(COMMAND) if part else {"missing": COMMAND, "file": str(path)}
        part = {"title": "Circuits", **missing}
    return {
        "circuits": part,
        "formation": formation_section(Path(directory), pngs),
        "attends": score_split_section(Path(directory), pngs, figures=figures),
        "attends_all": pairs_over_queries_section(Path(directory), pngs),
        "nodes": nodes_section(Path(directory)),
    }


def _part(path: Path, pngs: dict[str, bytes], figures: bool) -> dict | None:
    result = read_result(path, CircuitRun)  # ValueError naming the file and the field
    if result is None:
        return None
    if figures:
        _draw(path, result, pngs)
    steps = f" (m={result.steps})" if result.steps else ""
    found = result.faithfulness
    return {
        "title": f"Circuits: {result.task} in {result.model}, by {result.method}{steps}",
        "performance": WEIGHTS_ONLY if result.performance is None else result.performance.says(),
        "does_task": result.performance is None or result.performance.does_task,
        "baseline": _baseline_text(result.baseline),
        "sign_note": SIGN_NOTES.get(result.scores.metric),
        "edges": len(result.scores.edges),
        "cpr": None if found is None else f"{found.cpr:.3f}",
        "cmd": None if found is None else f"{found.cmd:.3f}",
        "command": COMMAND,
        # the notebook's displays of the same result: every edge with a threshold, the curve
        "display": show(result).html(),
        "curve_display": None if found is None else show(found).html(),
    }


def _draw(path: Path, result: CircuitRun, pngs: dict[str, bytes]) -> None:
    """The circuit on the graph and its faithfulness curve, for the figures folder."""
    try:
        graph = png_bytes(circuit_graph_figure(result))
        curve = None
        if result.faithfulness is not None:
            curve = png_bytes(faithfulness_figure(result))
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a circuits results file ({error})") from None
    pngs["circuits.png"] = graph
    if curve is not None:
        pngs["circuits_faithfulness.png"] = curve


# what the sign of an edge's score means, per metric: a score is the change in the metric when
# the edge carries the corrupted input, and these metrics fall when the behaviour is broken
_FALLS = (
    "A score is the change in {} when the edge carries the corrupted input: the edges the "
    "behaviour uses lower it, so the red (negative) edges are the important ones; blue "
    "edges work against the answer."
)
SIGN_NOTES = {
    "logprob": _FALLS.format("log p(answer)"),
    "logit_diff": _FALLS.format("the logit difference"),
    "prob_diff": _FALLS.format("the probability difference"),
    "kl": "A score is the change in KL to the clean run: larger is more important.",
}
WEIGHTS_ONLY = "Composition reads the weights only: the model was not run on the task."


def _baseline_text(baseline: dict[str, float] | None) -> str | None:
    """Composition's random baseline in words: what random matrices of these shapes score."""
    if not baseline:
        return None
    values = ", ".join(
        f"{mode.replace('_group', ' (K/V group)')} {v:.3f}" for mode, v in baseline.items()
    )
    return f"Random matrices of the same shapes score {values}: a score well above these is news."


__all__ = ["circuits_sections"]

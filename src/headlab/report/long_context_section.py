"""The report's long-context section: read one long text's results and a KV budget's, show each
through its display (the notebook's: ``report.displays``), write a sentence from each one's
numbers (the report measures nothing itself), and draw their figures for the figures folder.

From ``model_long-context.json`` (``headlab model heads --text-file`` or ``--max-tokens``): the
roles of every head, each head's blocked map and received profile (the roles display). From
``model_kv-budget.json`` (``headlab model kv-budget``): the plans against perplexity and copy
accuracy (the KV-budget display: a row per plan size, every plan, the groups each windows).
"""

from __future__ import annotations

from pathlib import Path

from headlab.report.displays import show
from headlab.report.figures import png_bytes
from headlab.report.long_context_figures import (
    chosen_heads,
    kv_budget_figure,
    maps_figure,
    roles_figure,
)
from headlab.report.reading import Skipped, skipping
from headlab.results.head_roles import RETRIEVAL
from headlab.results.json_store import read_result
from headlab.results.kv_budget_result import KVBudgetResult
from headlab.results.locations import model_results
from headlab.results.long_context_result import LongContextResult

LONG_FILE, BUDGET_FILE = "model_long-context.json", "model_kv-budget.json"
COMMANDS = {
    "roles": f"headlab model heads --model smollm2 --max-tokens 8192 --out "
    f"{model_results('long-context')}",
    "kv_budget": "headlab model kv-budget --model smollm2",
}


def roles_answer(result: LongContextResult) -> str:
    """One paragraph from the measured roles."""
    roles = result.roles
    n = result.context.n_tokens
    parts = [f"On one text of {n} tokens ({roles.copy_positions} copy positions)"]
    counts = roles.counts()
    if counts:
        total = sum(counts.values())
        share = counts["retrieval"] / total
        parts.append(
            f", {counts['retrieval']} of {total} heads ({share:.0%}) are retrieval heads "
            "(Wu et al. report under 5%), "
            + ", ".join(f"{counts[name]} {name}" for name in ("copy", "sink", "local", "mixed"))
            + f" (window: {roles.sinks} sinks + {roles.window})."
        )
    else:
        parts.append(f": {roles.note}.")
    if roles.retrieval is not None:
        v, layer, head = max(
            (v, layer, h) for layer, row in enumerate(roles.retrieval) for h, v in enumerate(row)
        )
        if v >= RETRIEVAL:
            parts.append(f" The strongest retrieval head is layer {layer} head {head} ({v:.2f}).")
        elif v > 0:
            parts.append(
                f" No head reaches Wu et al.'s threshold of {RETRIEVAL}: the best retrieval "
                f"score is {v:.2f} (layer {layer} head {head})."
            )
        else:
            parts.append(
                " No head ever put its largest weight on the copied token's source at a copy "
                "position the model predicted right: every retrieval score is 0."
            )
    return "".join(parts)


def budget_answer(result: KVBudgetResult) -> str:
    """One paragraph from the measured plans (the table has every plan size)."""
    base = result.baseline()
    text = (
        f"{result.model} at {result.n_tokens} tokens ({result.copy_positions} copy positions; "
        f"windowed groups keep {result.sinks} sinks + {result.window} recent tokens). The full "
        f"model: perplexity {base.perplexity:.2f}, copy accuracy {base.copy_accuracy:.3f}. "
        "The table compares the plan that windows the groups of lowest window error with "
        f"{sum(r.kind == 'random' and r.budget == _first_budget(result) for r in result.runs)} "
        "random plans of the same size and with the opposite ranking"
    )
    check = result.retrieval
    if check is not None:
        randoms = ", ".join(f"{a:.3f}" for a in check.random_copy_accuracy)
        text += (
            f". Masking the top {check.k} retrieval heads leaves copy accuracy "
            f"{check.copy_accuracy:.3f}; masking {check.k} random other heads: {randoms}"
        )
        if check.note:
            text += f" ({check.note})"
    return text + "."


def _first_budget(result: KVBudgetResult) -> float | None:
    return next((r.budget for r in result.runs if r.kind == "chosen"), None)


def long_context_sections(
    directory: Path, pngs: dict[str, bytes], *, figures: bool = True
) -> dict[str, dict]:
    """{"roles": ..., "kv_budget": ...}: each {answer, display, ...} or {missing, file} (and
    skipped: why, with a SkippedResultsWarning, for a file that breaks its schema); the figures
    go to ``pngs`` (for the figures folder; not drawn without ``figures``: the page shows the
    displays alone)."""
    out: dict[str, dict] = {}
    # Each part is read *and drawn* under ``skipping``: data a schema let through that still
    # cannot be drawn skips its file with one line, and the rest of the report is built.
    path = Path(directory) / LONG_FILE
    roles = skipping(path, lambda: _roles_part(path, figures))
    if isinstance(roles, Skipped):
        out["roles"] = roles.part(COMMANDS["roles"])
    elif roles is None:
        out["roles"] = {"missing": COMMANDS["roles"], "file": str(path)}
    else:
        out["roles"], drawn = roles
        pngs.update(drawn)
    path = Path(directory) / BUDGET_FILE
    budget = skipping(path, lambda: _budget_part(path, figures))
    if isinstance(budget, Skipped):
        out["kv_budget"] = budget.part(COMMANDS["kv_budget"])
    elif budget is None:
        out["kv_budget"] = {"missing": COMMANDS["kv_budget"], "file": str(path)}
    else:
        out["kv_budget"], drawn = budget
        pngs.update(drawn)
    return out


def _roles_part(path: Path, figures: bool) -> tuple[dict, dict[str, bytes]] | None:
    """(the roles part, its two figures by file name); None without maps."""
    result = read_result(path, LongContextResult)
    if result is None or result.roles is None or result.maps is None:
        return None
    drawn = {}
    if figures:
        drawn["roles.png"] = png_bytes(roles_figure(result))
        drawn["attention_maps.png"] = png_bytes(maps_figure(result, chosen_heads(result)))
    part = {
        "model": result.statistics.model,
        "n_tokens": result.context.n_tokens,
        "answer": roles_answer(result),
        "role_grid": result.roles.roles,
        "display": show(result).html(),  # the notebook's display of the same result
    }
    return part, drawn


def _budget_part(path: Path, figures: bool) -> tuple[dict, dict[str, bytes]] | None:
    budget = read_result(path, KVBudgetResult)
    if budget is None:
        return None
    part = {
        "answer": budget_answer(budget),
        "display": show(budget).html(),
    }
    return part, {"kv_budget.png": png_bytes(kv_budget_figure(budget))} if figures else {}

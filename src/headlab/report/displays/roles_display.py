"""Displays of heads at long context: every head's role on one long text (a layers x heads grid;
a click shows that head's blocked map and the attention each key receives, from the streaming
sums), and the per-head KV budget: a row per plan size (the chosen plan against the random plans
and the opposite ranking), every plan run, and which K/V groups each plan windows."""

from __future__ import annotations

import numpy as np

from headlab.report.displays.display_bundle import Display
from headlab.results.head_pattern_result import encode_floats
from headlab.results.kv_budget_result import KVBudgetResult
from headlab.results.long_context_result import LongContextResult


def _padded(nested: list, heads: int, tail: tuple[int, ...]) -> np.ndarray:
    """(layer, head, *tail) float32 from nested lists whose layers may hold fewer heads (zeros)."""
    out = np.zeros((len(nested), heads, *tail), dtype=np.float32)
    for layer, row in enumerate(nested):
        for head, cell in enumerate(row):
            out[layer, head] = np.asarray(cell, dtype=np.float32)
    return out


def roles_display(result: LongContextResult) -> Display:
    """Every head's role and its scores, and (files with maps) each head's maps along the text."""
    stats, roles, maps = result.statistics, result.roles, result.maps
    first = stats.first_token
    scores = {"first-token weight": stats.metrics[first]} if first else {}
    if roles is not None:
        for name in ("retrieval", "copy_weight", "window_error"):
            grid = getattr(roles, name)
            if grid is not None:
                scores[name.replace("_", " ")] = grid
    data = {
        "model": stats.model,
        "n_tokens": result.context.n_tokens,
        "layers": stats.num_layers,
        "heads": stats.num_heads,
        "roles": None if roles is None else roles.roles,
        "note": "" if roles is None else roles.note,
        "scores": scores,
        "window": None if roles is None else [roles.sinks, roles.window],
    }
    if maps is not None:
        blocks = len(maps.blocked[0][0]) if maps.blocked and maps.blocked[0] else 0
        bins = len(maps.received[0][0]) if maps.received and maps.received[0] else 0
        data["maps"] = {
            "block": maps.block,
            "blocks": blocks,
            "bin": maps.bin,
            "bins": bins,
            "blocked": encode_floats(_padded(maps.blocked, stats.num_heads, (blocks, blocks))),
            "received": encode_floats(_padded(maps.received, stats.num_heads, (bins,))),
        }
    return Display("roles", data, repr(result), "display-roles")


def kv_budget_display(result: KVBudgetResult) -> Display:
    """The plans (full, chosen, random, opposite) at each budget and the groups they window."""
    layers = 1 + max((int(r[0]) for r in result.group_ranking), default=0)
    groups = 1 + max((int(r[1]) for r in result.group_ranking), default=0)
    data = {
        "model": result.model,
        "n_tokens": result.n_tokens,
        "sinks": result.sinks,
        "window": result.window,
        "layers": layers,
        "groups": groups,
        "ranking": result.group_ranking,
        "plan_sizes": budget_rows(result),
        "runs": [
            {
                "kind": r.kind,
                "budget": r.budget,
                "seed": r.seed,
                "groups": r.groups,
                "kv_saved": r.kv_saved,
                "perplexity": r.perplexity,
                "copy_accuracy": r.copy_accuracy,
            }
            for r in result.runs
        ],
    }
    return Display("kv-budget", data, repr(result), "display-kv-budget")


def budget_rows(result: KVBudgetResult) -> list[dict]:
    """One row per plan size: the groups windowed, the KV memory saved (and the saving asked),
    perplexity against the full model and copy accuracy of the chosen plan, the random plans
    (lowest to highest) and the opposite ranking."""
    base = result.baseline()
    rows = []
    for run in sorted((r for r in result.runs if r.kind == "chosen"), key=lambda r: r.budget):
        same = [r for r in result.runs if r.budget == run.budget and r.kind != "full"]
        randoms = [r for r in same if r.kind == "random"]
        opposite = next((r for r in same if r.kind == "opposite"), None)

        def change(r) -> str:
            return f"{r.perplexity / base.perplexity - 1:+.1%}"

        rows.append(
            {
                "groups": f"{len(run.groups)} ({run.budget:.0%})",
                "saved": f"{run.kv_saved:.2f}x"
                + ("" if run.target_kv_saved is None else f" (asked {run.target_kv_saved:g}x)"),
                "perplexity": change(run),
                "random_perplexity": "\u2026".join(
                    change(r)
                    for r in (
                        min(randoms, key=lambda r: r.perplexity),
                        max(randoms, key=lambda r: r.perplexity),
                    )
                )
                if randoms
                else "",
                "opposite_perplexity": change(opposite) if opposite else "",
                "copy_accuracy": f"{run.copy_accuracy:.3f}",
                "random_copy": "\u2026".join(
                    f"{v:.3f}"
                    for v in (
                        min(r.copy_accuracy for r in randoms),
                        max(r.copy_accuracy for r in randoms),
                    )
                )
                if randoms
                else "",
                "opposite_copy": f"{opposite.copy_accuracy:.3f}" if opposite else "",
            }
        )
    return rows

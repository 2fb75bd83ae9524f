"""The summary table of a sweep's results (``headlab sweep`` and ``headlab sweep summary``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headlab.cli.tables import fitted_tables

if TYPE_CHECKING:  # pragma: no cover
    from rich.table import Table

    from headlab.results.sweep_summary import SummaryRow


def summary_tables(rows: list[SummaryRow], title: str) -> list[Table]:
    """The summary as rich Tables (split to fit the terminal): one row per (task, heads, K/V
    heads, head size)."""
    columns = ["task", "heads", "kv", "d_head", "params", "seeds", "final loss", "accuracy"]
    cells = [
        [
            r.task if r.attention == "plain" else f"{r.task} ({r.attention})",
            str(r.num_heads),
            str(r.num_kv_heads),
            str(r.head_dim),
            str(r.params),
            str(r.seeds),
            f"{r.loss_mean:.3f} ± {r.loss_std:.3f}",
            f"{r.accuracy_mean:.3f} ± {r.accuracy_std:.3f}",
            "-" if r.entropy_mean is None else f"{r.entropy_mean:.2f}",
        ]
        for r in rows
    ]
    return fitted_tables(title, [*columns, "head entropy"], cells, keys=2, left=["task"])

"""The tables of the ``model heads`` results: a layers x heads grid of one number per head, the
top heads of a detector, and (one long text) the attention sinks and the most concentrated heads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from headlab.cli.tables import fitted_tables

if TYPE_CHECKING:
    from headlab.results.long_context_result import HeavyHitters, LongContextFindings


def head_grid(title: str, values: list[list[float]], fmt: str = "{:.2f}") -> list[Table]:
    """layers x heads, split into several tables of fewer heads when wider than the terminal."""
    heads = max(len(row) for row in values)
    rows = [
        [str(layer), *(fmt.format(v) for v in row), *([""] * (heads - len(row)))]
        for layer, row in enumerate(values)
    ]
    return fitted_tables(title, ["layer", *(f"h{h}" for h in range(heads))], rows)


def top_table(title: str, rows: list[tuple[int, int, float]]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("rank", "layer", "head", "score"):
        table.add_column(col, justify="right")
    for rank, (layer, head, value) in enumerate(rows, start=1):
        table.add_row(str(rank), str(layer), str(head), f"{value:.3f}")
    return table


def sink_table(findings: LongContextFindings) -> Table:
    table = Table(
        title=f"attention sinks: {findings.sinks} of {findings.heads} heads "
        f"({findings.sink_share:.0%}) put > {findings.sink_threshold} of their weight on the "
        "first token; mean attention distance per layer (tokens)",
        title_justify="left",
    )
    distances = findings.mean_distance_per_layer
    per_row = 10
    table.add_column("layers", justify="right")
    for i in range(per_row):
        table.add_column(f"+{i}", justify="right", overflow="fold")
    for start in range(0, len(distances), per_row):
        row = [f"{d:.0f}" for d in distances[start : start + per_row]]
        table.add_row(f"{start}-", *row, *([""] * (per_row - len(row))))
    return table


def concentration_table(
    findings: LongContextFindings, heavy: HeavyHitters, tokens: list[str]
) -> Table:
    table = Table(
        title="heads whose attention is most concentrated on a few keys (share of the "
        "attention to keys after the first that the top 1% of keys receive)",
        title_justify="left",
    )
    for col in ("layer", "head", "share", "most attended keys (position: token)"):
        table.add_column(
            col, justify="left" if col.startswith("most") else "right", overflow="fold"
        )
    for layer, head, share in findings.most_concentrated:
        keys = heavy.top_keys[layer][head][:3]
        shown = ", ".join(f"{k}: {tokens[k]!r}" for k in keys)
        table.add_row(str(layer), str(head), f"{share:.2f}", shown)
    return table

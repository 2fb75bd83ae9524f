"""``headlab sweep plot``: the sweep's figure."""

from __future__ import annotations

import typer

from headlab.cli.outputs import FORCE, an_input
from headlab.cli.parsing import flags
from headlab.results.locations import SWEEP_FIGURE, SWEEP_RESULTS


def plot(
    results: str = typer.Option(
        str(SWEEP_RESULTS), "--results", help="Results file (JSONL).", callback=an_input
    ),
    out: str = typer.Option(str(SWEEP_FIGURE), "--out", help="PNG to write."),
    force: bool = FORCE,
) -> None:
    """Plot final accuracy and loss against head count, one column per task."""
    from headlab.report.figure_files import plot_sweep

    with flags("out", "force"):
        path = plot_sweep(results, out, force=force)
    print(f"wrote {path}")


def register(group: typer.Typer) -> None:
    """Add this command to the ``sweep`` group (``headlab.cli.app``)."""
    group.command("plot")(plot)

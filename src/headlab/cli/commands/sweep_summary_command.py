"""``headlab sweep summary``: the summary table of a results file."""

from __future__ import annotations

from pathlib import Path

import typer

from headlab.cli.outputs import an_input
from headlab.cli.sweep_tables import summary_tables
from headlab.results.locations import SWEEP_RESULTS


def summary(
    results: str = typer.Option(
        str(SWEEP_RESULTS), "--results", help="Results file (JSONL).", callback=an_input
    ),
) -> None:
    """Print the summary table of a results file."""
    from rich.console import Console

    from headlab.results.jsonl_store import read_rows
    from headlab.results.sweep_summary import summarize

    if not Path(results).is_file():
        raise FileNotFoundError(f"results file not found: {results}")
    Console().print(*summary_tables(summarize(read_rows(results)), str(results)))


def register(group: typer.Typer) -> None:
    """Add this command to the ``sweep`` group (``headlab.cli.app``)."""
    group.command("summary")(summary)

"""``headlab specialisation``: which head serves which lookup, over training."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from headlab.cli.outputs import AS_JSON, FIGURE, FORCE, claim, write_outputs
from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.results.locations import why_results

OUT = typer.Option(why_results("specialisation"), "--out", help="Results file (JSON).")


def specialisation(
    heads: str = typer.Option("1,2,4,8", "--heads", help="Head counts (d_model fixed)."),
    attention: str = typer.Option(
        "plain,talking-heads", "--attention", help="plain and/or talking-heads, comma separated."
    ),
    steps: int = typer.Option(800, "--steps", help="Training steps per run."),
    eval_every: int = typer.Option(50, "--eval-every", help="Steps between checkpoints."),
    seed: int = typer.Option(0, "--seed", help="Seed of the runs."),
    out: Path = OUT,
    figure: Path | None = FIGURE,
    force: bool = FORCE,
    as_json: bool = AS_JSON,
) -> None:
    """Train with h heads: which head serves which lookup.

    Train the multi-lookup task with h heads and ablate each head at every checkpoint: the
    heads x lookups matrix, the step at which heads split the work, talking heads beside.
    """
    from headlab.experiments.specialisation import SpecialisationRequest, measure_specialisation

    with flags("heads", "attention", "steps", "eval_every", "seed"):
        config = SpecialisationRequest(
            heads=tuple(int_list(heads, "--heads") or ()),
            attention=tuple(a.strip() for a in attention.split(",") if a.strip()),
            steps=steps,
            eval_every=eval_every,
            seed=seed,
        )
    claim("specialisation", out, force=force, figure=figure)
    with progress("specialisation: checkpoints", config.steps_total(), quiet=as_json) as update:
        result = measure_specialisation(config, on_step=update)
    from headlab.report.why_figures import specialisation_figure

    written = write_outputs(
        "specialisation",
        result,
        out,
        figure=figure,
        draw=specialisation_figure,
        force=force,
        as_json=as_json,
    )
    if written is None:
        return
    table = Table(title="multi-lookup: which head serves which lookup", title_justify="left")
    columns = ("attention", "heads", "params", "accuracy", "split step", "settled", "served by")
    for col in columns:
        table.add_column(col, justify="left" if col == "attention" else "right")
    for run in result.runs:
        served = run.checkpoints[-1].served_by
        table.add_row(
            run.attention,
            str(run.num_heads),
            str(run.params),
            f"{run.accuracy:.3f}",
            "-" if run.split_step is None else str(run.split_step),
            str(run.settled_step),
            " ".join("-" if h is None else str(h) for h in served),
        )
    Console().print(table)
    print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command()(specialisation)

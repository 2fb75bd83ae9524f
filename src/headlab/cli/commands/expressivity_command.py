"""``headlab expressivity``: the rank bottleneck of one head and the one-pattern limit, measured."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from headlab.cli.model_source import ModelChoice, model_source, open_model
from headlab.cli.outputs import AS_JSON, FIGURE, FORCE, claim, write_outputs
from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables
from headlab.results.locations import why_results

if TYPE_CHECKING:  # the analysis loads lazily: the CLI starts without torch
    from headlab.results.expressivity_result import RankRow

OUT = typer.Option(why_results("expressivity"), "--out", help="Results file (JSON).")


@model_source(
    default="minilm", help="Also fit this encoder's heads' patterns; 'none' to skip.", backend=False
)
def expressivity(
    seq_lens: str = typer.Option("8,16,32", "--seq-lens", help="Sequence lengths n."),
    head_dims: str = typer.Option("1,2,4,8,16,32", "--head-dims", help="Head sizes d_head."),
    targets: int = typer.Option(3, "--targets", help="Random targets per (n, d_head)."),
    steps: int = typer.Option(600, "--steps", help="Adam steps per fit."),
    heads: int = typer.Option(4, "--heads", help="h of the pattern test (d_model 32)."),
    source: ModelChoice = None,  # the model-source options (``model_source``)
    seed: int = typer.Option(0, "--seed", help="Seed of targets and fits."),
    out: Path = OUT,
    figure: Path | None = FIGURE,
    force: bool = FORCE,
    as_json: bool = AS_JSON,
) -> None:
    """What one head of each size can fit, and h heads against one.

    Fit attention patterns with one head of each size (the KL has a floor below d_head = n), and
    fit h different offsets at once with 1 head of 32 against h heads of 32 / h.
    """
    from headlab.analysis.expressivity import ExpressivityRequest, measure_expressivity

    with flags("seq_lens", "head_dims", "targets", "steps", "heads", "seed"):
        config = ExpressivityRequest(
            seq_lens=tuple(int_list(seq_lens, "--seq-lens") or ()),
            head_dims=tuple(int_list(head_dims, "--head-dims") or ()),
            targets=targets,
            steps=steps,
            heads=heads,
            seed=seed,
        )
    claim("expressivity", out, force=force, figure=figure)
    patterns, name, loaded = None, source.model, None
    if source.model != "none":
        loaded = open_model(source, quiet=as_json)
        name = loaded.name
    # One bar for both phases: the model's patterns (one pass per length), then the fits.
    before = 0 if loaded is None else len(config.seq_lens)
    total = before + config.fits_total(before)
    what = "expressivity: fits" if loaded is None else "expressivity: model patterns, then fits"
    with progress(what, total, quiet=as_json) as update:
        if loaded is not None:
            from headlab.heads.patterns import patterns_by_length
            from headlab.models import default_corpus

            patterns = patterns_by_length(
                loaded,
                default_corpus(64),
                config.seq_lens,
                config.targets,
                seed=seed,
                on_step=lambda done, _: update(done, detail=f"{name} patterns"),
            )

        result = measure_expressivity(
            config,
            model_patterns=patterns,
            model_name=name,
            on_step=lambda done, _: update(before + done, detail="fits"),
        )
    from headlab.report.why_figures import expressivity_figure

    written = write_outputs(
        "expressivity",
        result,
        out,
        figure=figure,
        draw=expressivity_figure,
        force=force,
        as_json=as_json,
    )
    if written is None:
        return
    console = Console()
    for table in rank_tables(result.rank, config.head_dims):
        console.print(table)
    for p in result.patterns:
        console.print(
            f"{p.blocks} offsets at once, {p.num_heads} head(s) of {p.head_dim}: "
            f"relative error {p.relative_error:.3f}",
            highlight=False,
        )
    print(f"wrote {out}")


def rank_tables(rank: list[RankRow], head_dims: Sequence[int]) -> list[Table]:
    """The best KL by targets, n and head size: one table, or several (targets and n repeated)
    where one would not fit the terminal. Rich would otherwise fold the model's name."""
    keys = sorted({(r.source, r.seq_len) for r in rank})
    rows = []
    for source, n in keys:
        kl = {r.head_dim: r.kl for r in rank if (r.source, r.seq_len) == (source, n)}
        rows.append([source, str(n), *(f"{kl[d]:.2g}" for d in head_dims)])
    columns = ["targets", "n", *(f"d={d}" for d in head_dims)]
    title = "best mean KL(target || one head), by head size"
    return fitted_tables(title, columns, rows, keys=2, left=["targets"])


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command()(expressivity)

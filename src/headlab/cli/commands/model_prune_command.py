"""``headlab model prune``: heads removed in 10% steps, by importance and at random."""

from __future__ import annotations

from pathlib import Path

import typer

from headlab.cli.model_options import (
    AS_JSON,
    CORPUS,
    FORCE,
    MAX_LENGTH,
    N_TEXTS,
    claim_analysis,
    corpus_request,
    load_for,
    out_option,
)
from headlab.cli.model_source import ModelChoice, model_source
from headlab.cli.outputs import emit_result
from headlab.cli.parsing import flags
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables

BY = typer.Option(
    "removal",
    "--by",
    help="removal (heads cut from the weights) or mask (any model; parameters stay).",
)

OUT = out_option("prune")


@model_source(folder=True)
def prune(
    source: ModelChoice,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    seed: int = typer.Option(0, "--seed", help="Seed of the random pruning order."),
    by: str = BY,
    out: Path = OUT,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """Remove heads in 10% steps, by importance and at random; measure each pruned model."""
    from headlab.heads import prune_by_importance
    from headlab.heads.requests import PruneRequest

    texts = corpus_request(corpus, n_texts, max_length)
    with flags("by", "seed"):
        request = PruneRequest(texts, seed=seed, by=by)
    claim_analysis("prune", out, force)
    loaded, request, max_length = load_for(source, request, quiet=as_json)
    with flags("by"), progress("pruning: model runs", None, quiet=as_json) as update:
        result = prune_by_importance(loaded, request, max_length=max_length, on_step=update)
    names = list(result.steps[0].measures)
    rows = [
        [
            s.order,
            f"{s.fraction_pruned:.0%}",
            str(s.heads_pruned),
            str(s.params),
            f"{s.latency_ms:.1f}",
            *(f"{s.measures[n]:.4f}" for n in names),
        ]
        for s in result.steps
    ]
    columns = ["order", "pruned", "heads", "params", "ms", *(n.replace("_", " ") for n in names)]
    how = "" if result.by == "removal" else " (by masking: parameters stay)"
    title = f"Pruning{how}, {result.model}, {result.n_texts} texts"
    tables = fitted_tables(title, columns, rows, keys=2, left=["order"])
    emit_result(result, out, force, as_json, tables)


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("prune")(prune)

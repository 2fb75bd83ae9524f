"""``headlab model collapse``: the same weights viewed with fewer heads."""

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
from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables

HEADS = typer.Option(
    "",
    "--heads",
    help="Head counts to view every layer as, comma separated [default: every count that "
    "divides each layer's heads].",
)

OUT = out_option("collapse")


@model_source(folder=True)
def collapse(
    source: ModelChoice,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    heads: str = HEADS,
    out: Path = OUT,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """The same weights viewed with fewer heads: all layers, then one layer at a time."""
    from headlab.heads import collapse_heads
    from headlab.heads.requests import CollapseRequest

    chosen = int_list(heads, "--heads", low=None)  # the request checks the counts
    texts = corpus_request(corpus, n_texts, max_length)
    with flags(head_counts="--heads"):
        request = CollapseRequest(texts, None if chosen is None else tuple(chosen))
    claim_analysis("collapse", out, force)
    loaded, request, max_length = load_for(source, request, quiet=as_json)
    # collapse_heads checks that each count divides the model's heads before its first run
    progress_bar = progress("collapse: model runs", None, quiet=as_json)
    with flags(head_counts="--heads"), progress_bar as update:
        result = collapse_heads(loaded, request, max_length=max_length, on_step=update)
    names = list(result.all_layers[0].measures)
    rows = [
        ["all" if r.layer is None else str(r.layer), str(r.num_heads)]
        + [f"{r.measures[n]:.4f}" for n in names]
        for r in result.all_layers + result.per_layer
    ]
    columns = ["layers", "heads", *(n.replace("_", " ") for n in names)]
    title = f"Collapse, {result.model}, {result.n_texts} texts"
    tables = fitted_tables(title, columns, rows, keys=2)
    emit_result(result, out, force, as_json, tables)


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("collapse")(collapse)

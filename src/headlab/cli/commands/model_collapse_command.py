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
    load_with_texts,
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
    from headlab.heads import check_head_counts, collapse_heads

    chosen = int_list(heads, "--heads")
    request = corpus_request(corpus, n_texts, max_length)
    claim_analysis("collapse", out, force)
    loaded, texts, max_length = load_with_texts(source, request, quiet=as_json)
    counts = None if chosen is None else tuple(chosen)
    if counts is not None:
        with flags(head_counts="--heads"):
            check_head_counts(loaded, counts)
    with progress("collapse: model runs", None, quiet=as_json) as update:
        result = collapse_heads(loaded, texts, counts, max_length=max_length, on_step=update)
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

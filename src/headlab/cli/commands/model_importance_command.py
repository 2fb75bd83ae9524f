"""``headlab model importance``: Michel et al.'s head importance."""

from __future__ import annotations

from pathlib import Path

import typer

from headlab.cli.head_tables import head_grid
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

OUT = out_option("importance")


@model_source(folder=True)
def importance(
    source: ModelChoice,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    temperature: float = typer.Option(0.05, "--temperature", help="InfoNCE temperature."),
    out: Path = OUT,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """Michel et al. head importance E|dL/d xi_h| (decoders: next-token cross-entropy)."""
    from headlab.heads import head_importance
    from headlab.heads.requests import ImportanceRequest

    texts = corpus_request(corpus, n_texts, max_length)
    with flags("temperature"):
        request = ImportanceRequest(texts, temperature)
    claim_analysis("importance", out, force)
    loaded, request, max_length = load_for(source, request, quiet=as_json)
    with progress("importance: batches", None, quiet=as_json) as update:
        result = head_importance(loaded, request, max_length=max_length, on_batch=update)
    title = f"Importance (normalised per layer), {result.model}, {result.n_texts} texts"
    emit_result(result, out, force, as_json, head_grid(title, result.importance))


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("importance")(importance)

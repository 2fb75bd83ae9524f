"""Options shared by the ``headlab model`` commands over many short texts (``--corpus``,
``--n-texts``, ``--max-length``) and their outputs, and the one way those commands load a
model with its texts: every input checked (``headlab.heads.requests.CorpusRequest``) before it
loads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from headlab.cli.model_source import ModelChoice, open_model
from headlab.cli.outputs import FORCE, an_input, claim
from headlab.cli.parsing import flags
from headlab.results.locations import model_results

CORPUS = typer.Option(
    None, "--corpus", help="Text file, one text per line (default: stdlib).", callback=an_input
)
N_TEXTS = typer.Option(300, "--n-texts", help="Number of texts to use.")
MAX_LENGTH = typer.Option(
    None, "--max-length", help="Tokens kept per text [default: 128, or the model's positions]."
)
AS_JSON = typer.Option(False, "--json", help="Print the results document as JSON.")
FIGURE = typer.Option(None, "--figure", help="Write a layers x heads PNG grid.")
FORCE_WITH_FIGURE = FORCE
# the request's fields, which its errors name, are these options
CORPUS_FLAGS = ("n_texts", "max_length")


def out_option(name: str) -> typer.models.OptionInfo:
    """``--out``, defaulting to the results file of the ``model`` analysis ``name``."""
    return typer.Option(model_results(name), "--out", help="Results file (JSON).")


def claim_analysis(analysis: str, out: Path, force: bool, figure: Path | None = None) -> None:
    """Check the output paths before any work (they are checked again when written)."""
    claim(f"model-{analysis}", out, force=force, figure=figure)


def corpus_request(corpus: Path | None, n_texts: int, max_length: int | None):
    """The options as the library's ``CorpusRequest`` (checked now, naming the options)."""
    from headlab.heads.requests import CorpusRequest

    with flags(*CORPUS_FLAGS):
        return CorpusRequest(n_texts=n_texts, max_length=max_length, corpus=corpus)


def load_with_texts(source: ModelChoice, request, *, quiet: bool, kind_checked: bool = False):
    """(model, texts, max_length): the texts read before the model loads; a ``--max-length``
    given checked against the positions its config declares before the load too (the outline),
    and the length checked against the loaded model's positions (``kind_checked``: as
    ``open_model``'s)."""
    with flags(*CORPUS_FLAGS):
        texts = request.texts()
    if request.max_length is not None:
        check_length_before_load(source, request, quiet=quiet, kind_checked=kind_checked)
        kind_checked = True
    loaded = open_model(source, quiet=quiet, kind_checked=kind_checked)
    with flags(*CORPUS_FLAGS):
        return loaded, texts, request.length_for(loaded.max_positions)


def check_length_before_load(
    source: ModelChoice, request, *, quiet: bool, kind_checked: bool = False
) -> None:
    """ValueError naming --max-length when it asks for more tokens than the positions the
    model's config declares, read before any weight loads (``headlab.models.outline``)."""
    from headlab.cli.model_source import model_outline

    found = model_outline(source, quiet=quiet, kind_checked=kind_checked)
    if found.max_positions is not None:
        with flags(*CORPUS_FLAGS):
            request.length_for(found.max_positions)


def load_for(source: ModelChoice, request, *, quiet: bool, kind_checked: bool = False):
    """(model, request, max_length) for an analysis request over a ``CorpusRequest``
    (``headlab.heads.requests``): its texts read before the model loads and put in the
    request's corpus, the length checked against the model's positions once it has."""
    loaded, texts, max_length = load_with_texts(
        source, request.corpus, quiet=quiet, kind_checked=kind_checked
    )
    return loaded, replace(request, corpus=tuple(texts)), max_length

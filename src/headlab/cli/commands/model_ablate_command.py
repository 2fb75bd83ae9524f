"""``headlab model ablate``: the model's loss with and without some heads."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from headlab.cli import model_kinds as kinds
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
from headlab.results.locations import model_results

HEADS = typer.Option(
    ...,
    "--ablate",
    help="Heads to ablate: LAYER.HEAD or a whole K/V group LAYER.gGROUP, as circuits names it "
    "(3.5,4.g1; 4.kv1 is read too).",
)

OUT = out_option("ablate")


@model_source(folder=True)
def ablate(
    heads: str = HEADS,
    mode: str = typer.Option("zero", "--mode", help="zero, mean or resample."),
    source: ModelChoice = None,  # the model-source options (``model_source``)
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    out: Path = OUT,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
    image: Path | None = kinds.IMAGE,
    audio: Path | None = kinds.AUDIO,
    source_text: list[str] | None = kinds.SOURCE_TEXT,
    target_text: list[str] | None = kinds.TARGET_TEXT,
    attention: str | None = kinds.ATTENTION,
    tower: str | None = kinds.TOWER,
) -> None:
    """The model's loss with and without the --ablate heads (their outputs before W_O).

    Encoder-decoders (--source-text or --audio): the target's loss, heads of one --attention
    kind ablated. Image models (--image): 1 - cosine of the class token's output.
    CLIP (a text and an image tower): --tower text for its text tower on the texts.
    """
    on_text_tower = kinds.text_tower(source, tower, image, audio, source_text, target_text)
    if not on_text_tower and (
        kinds.asked(image, audio, source_text, target_text) or kinds.declared(source)[0] != "text"
    ):
        inputs = kinds.read_inputs(image, audio, source_text, target_text)
        kind_out = None if out == model_results("ablate") else out  # its own default file
        kinds.kind_ablate(source, inputs, attention, heads, kind_out, as_json, force)
        return
    from headlab.heads.ablation import ablation_effect, parse_ablation
    from headlab.heads.requests import AblationRequest

    texts = corpus_request(corpus, n_texts, max_length)
    with flags("mode", heads="--ablate"):
        chosen, groups = parse_ablation(heads)
        request = AblationRequest(tuple(chosen), tuple(groups), mode, texts)
    claim_analysis("ablate", out, force)
    loaded, request, max_length = load_for(source, request, quiet=as_json, kind_checked=True)
    # ablation_effect checks the heads against the model before its first pass
    with flags(heads="--ablate"), progress("ablation: passes", 2, quiet=as_json) as update:
        result = ablation_effect(loaded, request, max_length=max_length, on_step=update)
    row = [
        ",".join(f"{l}.{h}" for l, h in result.heads),
        result.mode,
        f"{result.baseline:.4f}",
        f"{result.ablated:.4f}",
        f"{result.change:+.4f}",
    ]
    columns = ["heads", "mode", "baseline", "ablated", "change"]
    title = f"Ablation, {result.model}, {result.n_texts} texts"
    tables = fitted_tables(title, columns, [row], keys=0, left=["heads"])
    # a sentence, not a column: as a column it split the table in three at 80 columns
    emit_result(result, out, force, as_json, [*tables, Text(f"objective: {result.objective}")])


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("ablate")(ablate)

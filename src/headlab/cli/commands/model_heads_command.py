"""``headlab model heads``: per-head attention statistics over many short texts, or every head
on one long text (``--text-file`` / ``--max-tokens``) with its role."""

from __future__ import annotations

from pathlib import Path

import typer

from headlab.cli import model_kinds as kinds
from headlab.cli.head_tables import concentration_table, head_grid, sink_table, top_table
from headlab.cli.model_options import (
    AS_JSON,
    CORPUS,
    FIGURE,
    FORCE_WITH_FIGURE,
    MAX_LENGTH,
    N_TEXTS,
    claim_analysis,
    corpus_request,
    load_with_texts,
)
from headlab.cli.model_source import ModelChoice, model_source, open_model
from headlab.cli.outputs import an_input, emit_result, note_lines, writing
from headlab.cli.parsing import flags
from headlab.cli.progress import progress
from headlab.cli.role_tables import role_tables
from headlab.results.locations import model_results

TEXT_FILE = typer.Option(
    None,
    "--text-file",
    help="One long text (UTF-8): every head on it, at full length.",
    callback=an_input,
)
MAX_TOKENS = typer.Option(
    None,
    "--max-tokens",
    help="Cut the long text to this many tokens [default: the model's context]; without "
    "--text-file, the built-in copy task: a passage placed early in the standard library's "
    "docstrings and repeated at the end.",
)
WINDOW = typer.Option(
    None,
    "--window",
    help="Recent tokens of the window errors (one long text) [default: 256; texts not longer "
    "than --sinks + 256 get none].",
)
SINKS = typer.Option(4, "--sinks", help="First tokens the window errors keep (one long text).")
DETECTOR_LENGTH = typer.Option(
    None,
    "--detector-length",
    help="Tokens of each random sequence the head detectors (decoders) see twice [default: 50, "
    "or half the model's positions when it has fewer than 100]; 0: no detectors.",
)
OUT = typer.Option(
    None,
    "--out",
    help=f"Results file (JSON) [default: {model_results('heads')}, or "
    f"{model_results('long-context')} for one long text].",
)
# the library's arguments, which its errors name, are this command's flags
LONG_FLAGS = {
    "max_tokens": "--max-tokens",
    "n_tokens": "--max-tokens",
    "window": "--window",
    "sinks": "--sinks",
    "text_file": "--text-file",
}


@model_source(folder=True)
def heads(
    source: ModelChoice,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    text_file: Path | None = TEXT_FILE,
    max_tokens: int | None = MAX_TOKENS,
    metric: str = typer.Option("entropy", "--metric", help="Metric shown in the table."),
    window: int | None = WINDOW,
    sinks: int = SINKS,
    detector_length: int | None = DETECTOR_LENGTH,
    figure: Path | None = FIGURE,
    out: Path | None = OUT,
    as_json: bool = AS_JSON,
    force: bool = FORCE_WITH_FIGURE,
    image: Path | None = kinds.IMAGE,
    audio: Path | None = kinds.AUDIO,
    source_text: list[str] | None = kinds.SOURCE_TEXT,
    target_text: list[str] | None = kinds.TARGET_TEXT,
    tower: str | None = kinds.TOWER,
) -> None:
    """Per-head attention statistics, and (decoders) the head kinds.

    Over the corpus: each head's statistics and, for decoders, the previous-token,
    duplicate-token and induction heads, and the attention sinks.

    With --text-file or --max-tokens: every head on one long text, exactly, without ever holding
    the attention weights (memory grows linearly with the length), and in the same pass its role:
    retrieval (Wu et al.), copy, sink, local (what sinks + a recent window reproduce) or mixed.

    Encoder-decoders (--source-text, or --audio for Whisper): each attention kind apart.
    Image models (--image): statistics over patches and the high-norm tokens.
    CLIP (a text and an image tower): --tower text for its text tower on the texts.
    """
    on_text_tower = kinds.text_tower(source, tower, image, audio, source_text, target_text)
    if not on_text_tower and (
        kinds.asked(image, audio, source_text, target_text) or kinds.declared(source)[0] != "text"
    ):
        inputs = kinds.read_inputs(image, audio, source_text, target_text)
        shown = None if metric == "entropy" else metric
        kinds.kind_heads(source, inputs, shown, out, as_json, force)
        return
    if text_file is not None or max_tokens is not None:
        if corpus is not None or max_length is not None:
            raise ValueError(
                "--corpus and --max-length are for many short texts; with "
                "--text-file or --max-tokens pass neither"
            )
        if detector_length is not None:
            raise ValueError(
                "--detector-length is for many short texts (the head detectors); with "
                "--text-file or --max-tokens leave it out"
            )
        _long_context(
            source, text_file, max_tokens, metric, (sinks, window), figure, out, as_json, force
        )
        return
    if window is not None:
        raise ValueError("--window is for one long text: pass --text-file or --max-tokens")
    from headlab.heads import head_statistics
    from headlab.heads.detectors import check_asked_length, check_length
    from headlab.heads.statistics import check_metric

    request = corpus_request(corpus, n_texts, max_length)
    out = model_results("heads") if out is None else out
    claim_analysis("heads", out, force, figure)
    with flags("detector_length"):
        if detector_length is not None:  # the model's bound once it is loaded
            check_asked_length(detector_length)
        loaded, texts, max_length = load_with_texts(
            source, request, quiet=as_json, kind_checked=True
        )
        if detector_length and loaded.causal:
            check_length(loaded, detector_length)
    with flags("metric"):
        check_metric(loaded, metric)
    with progress("head statistics: texts", len(texts), quiet=as_json) as update:
        result = head_statistics(
            loaded,
            texts,
            max_length=max_length,
            detector_length=detector_length,
            on_batch=update,
        )
    if figure is not None:
        from headlab.report.figure_files import write_heads_figure

        with writing("--figure"):
            write_heads_figure(result.to_dict(), figure, force=force)
    title = f"{metric} per head, {result.model}, {result.n_texts} texts"
    tables = head_grid(title, result.metrics[metric])
    for name in result.detectors:
        tables.append(top_table(f"top {name.replace('_', '-')} heads", result.top(name)))
    if result.first_token is not None:
        title = "top attention sinks (mean weight on the first token)"
        tables.append(top_table(title, result.top(result.first_token)))
    tables.extend(note_lines(result.notes))
    emit_result(result, out, force, as_json, tables)


def _long_context(
    source: ModelChoice,
    text_file: Path | None,
    max_tokens: int | None,
    metric: str,
    window: tuple[int, int | None],
    figure: Path | None,
    out: Path | None,
    as_json: bool,
    force: bool,
) -> None:
    """``model heads --text-file/--max-tokens``: one long text, streaming statistics and the
    head roles in the same pass (``heads.long_text_run``)."""
    from headlab.heads.long_text_run import LongTextRequest, long_text_run
    from headlab.heads.statistics import check_metric

    sinks, size = window
    with flags(**LONG_FLAGS):  # the window given must fit in the text; the default may not
        request = LongTextRequest(text_file, max_tokens, sinks, size)
    out = model_results("long-context") if out is None else out
    claim_analysis("long-context", out, force, figure)
    text = request.open("--text-file")  # checked before the model loads, read after
    loaded = open_model(source, quiet=as_json, kind_checked=True)  # declared "text" above
    with flags("metric"):
        check_metric(loaded, metric)
    layers = progress("one long text: layers", loaded.num_layers, quiet=as_json)
    with layers as update, flags(**LONG_FLAGS):
        result, cut = long_text_run(loaded, request, text=text, on_layer=update)
    document = result.result()
    if figure is not None and document.roles is not None:
        from headlab.report.figure_files import write_roles_figure

        with writing("--figure"):
            write_roles_figure(document, figure, force=force)
    findings = document.findings
    n = len(result.tokens)
    title = f"{metric} per head, {result.statistics.model}, one text of {n} tokens{cut}"
    tables = head_grid(title, result.statistics.metrics[metric])
    tables.extend(note_lines(result.statistics.notes))
    tables.append(sink_table(findings))
    tables.append(concentration_table(findings, document.heavy_hitters, result.tokens))
    tables.extend(role_tables(document.roles, document.statistics))
    emit_result(document, out, force, as_json, tables)


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("heads")(heads)

"""``headlab model heads|collapse|importance|prune|ablate|generate|families``: the heads of a
trained model.

``--model`` names the model: minilm (default, the packaged all-MiniLM-L6-v2 encoder), smollm2
(the packaged SmolLM2-135M-Instruct decoder), a path (a .gguf file, a transformers checkpoint
folder) or a hub id from the local cache; ``--backend``, ``--download`` and
``--trust-remote-code`` say how (``headlab.models.load``). The commands parse, call
``headlab.heads`` and print.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from headlab.cli.outputs import (
    an_input,
    an_input_folder,
    claim,
    emit_result,
    note_lines,
    print_json,
    writing,
)
from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables
from headlab.results.locations import model_results

if TYPE_CHECKING:
    from headlab.results.long_context_result import HeavyHitters, LongContextFindings

model_app = typer.Typer(
    help="Analyse the heads of a trained model: minilm (default), smollm2 or a path.",
    no_args_is_help=True,
)

MODEL = typer.Option(
    None,
    "--model",
    help="minilm (default), smollm2, a path (.gguf, a transformers checkpoint folder) or a hub id.",
)
MODEL_DIR = typer.Option(
    None, "--model-dir", help="A model folder (same as --model PATH).", callback=an_input_folder
)
BACKEND = typer.Option(
    None,
    "--backend",
    help="Accepted for old scripts; it no longer chooses anything: every model runs as a "
    "transformers model on headlab's attention (docs/transformers.md).",
)
DOWNLOAD = typer.Option(
    False, "--download", help="Fetch a hub id that is not in the local cache (needs the network)."
)
TRUST_REMOTE_CODE = typer.Option(
    False,
    "--trust-remote-code",
    help="Run the checkpoint's own Python code (its auto_map): only for checkpoints you trust.",
)
CORPUS = typer.Option(
    None, "--corpus", help="Text file, one text per line (default: stdlib).", callback=an_input
)
N_TEXTS = typer.Option(300, "--n-texts", help="Number of texts to use.")
MAX_LENGTH = typer.Option(
    None, "--max-length", help="Tokens kept per text [default: 128, or the model's positions]."
)
AS_JSON = typer.Option(False, "--json", help="Print the results document as JSON.")


def _out(name: str) -> typer.models.OptionInfo:
    return typer.Option(model_results(name), "--out", help="Results file (JSON).")


OUT_COLLAPSE = _out("collapse")
OUT_IMPORTANCE, OUT_PRUNE = _out("importance"), _out("prune")
OUT_ABLATE = _out("ablate")
FIGURE = typer.Option(None, "--figure", help="Write a layers x heads PNG grid.")
FORCE = typer.Option(
    False, "--force", help="Replace --out even if it is not this analysis' file."
)
FORCE_WITH_FIGURE = typer.Option(
    False, "--force", help="Replace --out (and --figure) even if it is not this analysis' file."
)


def claim_analysis(analysis: str, out: Path, force: bool, figure: Path | None = None) -> None:
    """Check the output paths before any work (they are checked again when written)."""
    claim(f"model-{analysis}", out, force=force, figure=figure)


@dataclass(frozen=True)
class Route:
    """How --model is loaded: --backend, --download, --trust-remote-code; ``quiet`` (--json):
    no progress pulse while it loads."""

    backend: str | None = None
    download: bool = False
    trust_remote_code: bool = False
    quiet: bool = False


def hub_access(download: bool) -> None:
    """The Hugging Face hub stays offline unless --download (before anything loads)."""
    if not download:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def open_model(model: str | Path | None, route: Route):
    """``headlab.models.load`` with the command's options; offline unless --download."""
    hub_access(route.download)
    from headlab.models import load

    names = ("model", "backend", "download", "trust_remote_code")
    with flags(*names), progress("loading the model", None, quiet=route.quiet):
        return load(
            model,
            backend=route.backend,
            download=route.download,
            trust_remote_code=route.trust_remote_code,
        )


def _load(
    model: str | None,
    model_dir: Path | None,
    corpus: Path | None,
    n_texts: int,
    max_length: int | None,
    route: Route,
):
    """(model, texts, max_length): every input checked before any analysis runs."""
    from headlab.limits import check_int
    from headlab.models import default_corpus, read_corpus

    if model is not None and model_dir is not None:
        raise ValueError("pass --model or --model-dir, not both")
    check_int("--n-texts", n_texts, high=10**6)
    if max_length is not None:
        check_int("--max-length", max_length, low=2)
    if corpus is not None:
        texts = read_corpus(corpus, n_texts)
    else:  # its size is known before the model loads
        with flags("n_texts"):
            texts = default_corpus(n_texts)
    loaded = open_model(model if model_dir is None else model_dir, route)
    positions = loaded.max_positions
    max_length = min(128, positions) if max_length is None else max_length
    check_int("--max-length", max_length, low=2, high=positions)
    return loaded, texts, max_length


def _grid(title: str, values: list[list[float]], fmt: str = "{:.2f}") -> list[Table]:
    """layers x heads, split into several tables of fewer heads when wider than the terminal."""
    heads = max(len(row) for row in values)
    rows = [
        [str(layer), *(fmt.format(v) for v in row), *([""] * (heads - len(row)))]
        for layer, row in enumerate(values)
    ]
    return fitted_tables(title, ["layer", *(f"h{h}" for h in range(heads))], rows)


def _top_table(title: str, rows: list[tuple[int, int, float]]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("rank", "layer", "head", "score"):
        table.add_column(col, justify="right")
    for rank, (layer, head, value) in enumerate(rows, start=1):
        table.add_row(str(rank), str(layer), str(head), f"{value:.3f}")
    return table


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


OUT_HEADS_OR_LONG = typer.Option(
    None,
    "--out",
    help=f"Results file (JSON) [default: {model_results('heads')}, or "
    f"{model_results('long-context')} for one long text].",
)


@model_app.command()
def heads(
    model: str | None = MODEL,
    model_dir: Path | None = MODEL_DIR,
    backend: str | None = BACKEND,
    download: bool = DOWNLOAD,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
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
    out: Path | None = OUT_HEADS_OR_LONG,
    as_json: bool = AS_JSON,
    force: bool = FORCE_WITH_FIGURE,
) -> None:
    """Per-head attention statistics, and (decoders) the head kinds.

    Over the corpus: each head's statistics and, for decoders, the previous-token,
    duplicate-token and induction heads, and the attention sinks.

    With --text-file or --max-tokens: every head on one long text, exactly, without ever holding
    the attention weights (memory grows linearly with the length), and in the same pass its role:
    retrieval (Wu et al.), copy, sink, local (what sinks + a recent window reproduce) or mixed.
    """
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
        route = Route(backend, download, trust_remote_code, as_json)
        _long_context(
            model, model_dir, route, text_file, max_tokens, metric, (sinks, window), figure,
            out, as_json, force,
        )  # fmt: skip
        return
    if window is not None:
        raise ValueError("--window is for one long text: pass --text-file or --max-tokens")
    from headlab.heads import head_statistics
    from headlab.heads.detectors import check_length, default_length
    from headlab.limits import check_int

    out = model_results("heads") if out is None else out
    claim_analysis("heads", out, force, figure)
    if detector_length is not None:
        check_int("--detector-length", detector_length, low=0)
    route = Route(backend, download, trust_remote_code, as_json)
    loaded, texts, max_length = _load(model, model_dir, corpus, n_texts, max_length, route)
    if detector_length is None:
        detector_length = default_length(loaded)
    elif detector_length and loaded.causal:
        with flags("detector_length"):
            check_length(loaded, detector_length)
    _check_metric(metric, loaded)
    with progress("head statistics: texts", len(texts), quiet=as_json) as update:
        result = head_statistics(
            loaded, texts, max_length=max_length, detector_length=detector_length,
            on_batch=update,
        )  # fmt: skip
    if figure is not None:
        from headlab.report.figure_files import write_heads_figure

        with writing("--figure"):
            write_heads_figure(result.to_dict(), figure, force=force)
    title = f"{metric} per head, {result.model}, {result.n_texts} texts"
    tables = _grid(title, result.metrics[metric])
    for name in result.detectors:
        tables.append(_top_table(f"top {name.replace('_', '-')} heads", result.top(name)))
    if result.first_token is not None:
        title = "top attention sinks (mean weight on the first token)"
        tables.append(_top_table(title, result.top(result.first_token)))
    tables.extend(note_lines(result.notes))
    emit_result(result, out, force, as_json, tables)


def _check_metric(metric: str, loaded) -> None:
    """ValueError unless ``loaded`` reports ``metric``; known from its special positions and one
    forward of two tokens, so before any statistics are computed."""
    from headlab.heads.statistics import model_metrics

    names, notes = model_metrics(loaded)
    if metric not in names:
        why = next((f" ({note})" for note in notes if note.startswith(f"{metric} ")), "")
        raise ValueError(
            f"--metric must be one of {', '.join(names)} for this model, got {metric!r}{why}"
        )


def _long_context(
    model: str | None,
    model_dir: Path | None,
    route: Route,
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
    head roles in the same pass."""
    from headlab.cli.roles import role_tables
    from headlab.heads.long_context import long_text_statistics
    from headlab.heads.repeats import context_copy_task
    from headlab.limits import check_int
    from headlab.results.head_roles import WINDOW as DEFAULT_WINDOW
    from headlab.results.input_files import open_text

    out = model_results("long-context") if out is None else out
    claim_analysis("long-context", out, force, figure)
    if max_tokens is not None:
        check_int("--max-tokens", max_tokens, low=2)
    sinks, size = window
    check_int("--sinks", sinks, low=0)
    if size is not None:
        check_int("--window", size)
        if max_tokens is not None and max_tokens <= sinks + size:
            raise ValueError(
                f"--max-tokens {max_tokens} is not longer than --sinks {sinks} + --window {size}"
            )
    if model is not None and model_dir is not None:
        raise ValueError("pass --model or --model-dir, not both")
    source = None if text_file is None else open_text(text_file, "--text-file")  # checked now
    loaded = open_model(model if model_dir is None else model_dir, route)
    if max_tokens is not None:
        check_int("--max-tokens", max_tokens, low=2, high=loaded.max_positions)
    _check_metric(metric, loaded)
    read = None  # only the start of the file that the cut needs is read and tokenised
    if source is not None:
        read = source.read_tokens(loaded.count_tokens, max_tokens or loaded.max_positions)
    text = None if read is None else read.text
    if text is None:  # the built-in long-range copy task, at the length asked
        with flags(n_tokens="--max-tokens"):
            text = context_copy_task(loaded, max_tokens, "give --text-file").text
    layers = progress("one long text: layers", loaded.num_layers, quiet=as_json)
    with layers as update, flags(window="--window", sinks="--sinks"):
        result = long_text_statistics(
            loaded,
            text,
            max_tokens=max_tokens,
            on_layer=update,
            window=(sinks, size or DEFAULT_WINDOW),
            strict_window=size is not None,
        )
    document = result.result()
    if figure is not None and document.roles is not None:
        from headlab.report.figure_files import write_roles_figure

        with writing("--figure"):
            write_roles_figure(document, figure, force=force)
    findings = document.findings
    n, whole = len(result.tokens), result.text_tokens
    cut = f" (cut from at least {whole}: the rest was not analysed)" if result.truncated else ""
    if read is not None and not read.complete:
        cut = f" ({read.cut_note()}: the rest was not read)"
    title = f"{metric} per head, {result.statistics.model}, one text of {n} tokens{cut}"
    tables = _grid(title, result.statistics.metrics[metric])
    tables.extend(note_lines(result.statistics.notes))
    tables.append(_sink_table(findings))
    tables.append(_concentration_table(findings, document.heavy_hitters, result.tokens))
    tables.extend(role_tables(document.roles, document.statistics))
    emit_result(document, out, force, as_json, tables)


def _sink_table(findings: LongContextFindings) -> Table:
    table = Table(
        title=f"attention sinks: {findings.sinks} of {findings.heads} heads "
        f"({findings.sink_share:.0%}) put > {findings.sink_threshold} of their weight on the "
        "first token; mean attention distance per layer (tokens)",
        title_justify="left",
    )
    distances = findings.mean_distance_per_layer
    per_row = 10
    table.add_column("layers", justify="right")
    for i in range(per_row):
        table.add_column(f"+{i}", justify="right", overflow="fold")
    for start in range(0, len(distances), per_row):
        row = [f"{d:.0f}" for d in distances[start : start + per_row]]
        table.add_row(f"{start}-", *row, *([""] * (per_row - len(row))))
    return table


def _concentration_table(
    findings: LongContextFindings, heavy: HeavyHitters, tokens: list[str]
) -> Table:
    table = Table(
        title="heads whose attention is most concentrated on a few keys (share of the "
        "attention to keys after the first that the top 1% of keys receive)",
        title_justify="left",
    )
    for col in ("layer", "head", "share", "most attended keys (position: token)"):
        table.add_column(
            col, justify="left" if col.startswith("most") else "right", overflow="fold"
        )
    for layer, head, share in findings.most_concentrated:
        keys = heavy.top_keys[layer][head][:3]
        shown = ", ".join(f"{k}: {tokens[k]!r}" for k in keys)
        table.add_row(str(layer), str(head), f"{share:.2f}", shown)
    return table


@model_app.command()
def collapse(
    model: str | None = MODEL,
    model_dir: Path | None = MODEL_DIR,
    backend: str | None = BACKEND,
    download: bool = DOWNLOAD,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    heads: str = typer.Option(
        "",
        "--heads",
        help="Head counts to view every layer as, comma separated [default: every count that "
        "divides each layer's heads].",
    ),
    out: Path = OUT_COLLAPSE,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """The same weights viewed with fewer heads: all layers, then one layer at a time."""
    from headlab.heads import check_head_counts, collapse_heads

    chosen = int_list(heads, "--heads")
    claim_analysis("collapse", out, force)
    route = Route(backend, download, trust_remote_code, as_json)
    loaded, texts, max_length = _load(model, model_dir, corpus, n_texts, max_length, route)
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


@model_app.command()
def importance(
    model: str | None = MODEL,
    model_dir: Path | None = MODEL_DIR,
    backend: str | None = BACKEND,
    download: bool = DOWNLOAD,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    temperature: float = typer.Option(0.05, "--temperature", help="InfoNCE temperature."),
    out: Path = OUT_IMPORTANCE,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """Michel et al. head importance E|dL/d xi_h| (decoders: next-token cross-entropy)."""
    from headlab.heads import head_importance
    from headlab.limits import check_finite

    check_finite("--temperature", temperature, positive=True)
    claim_analysis("importance", out, force)
    route = Route(backend, download, trust_remote_code, as_json)
    loaded, texts, max_length = _load(model, model_dir, corpus, n_texts, max_length, route)
    with progress("importance: batches", None, quiet=as_json) as update:
        result = head_importance(
            loaded,
            texts,
            temperature=temperature,
            max_length=max_length,
            on_batch=update,
        )
    title = f"Importance (normalised per layer), {result.model}, {result.n_texts} texts"
    emit_result(result, out, force, as_json, _grid(title, result.importance))


@model_app.command()
def prune(
    model: str | None = MODEL,
    model_dir: Path | None = MODEL_DIR,
    backend: str | None = BACKEND,
    download: bool = DOWNLOAD,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    seed: int = typer.Option(0, "--seed", help="Seed of the random pruning order."),
    by: str = typer.Option(
        "removal",
        "--by",
        help="removal (heads cut from the weights) or mask (any model; parameters stay).",
    ),
    out: Path = OUT_PRUNE,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """Remove heads in 10% steps, by importance and at random; measure each pruned model."""
    from headlab.heads import prune_by_importance
    from headlab.heads.pruning import check_by
    from headlab.limits import check_seed

    check_seed("--seed", seed)
    with flags("by"):
        check_by(by)
    claim_analysis("prune", out, force)
    route = Route(backend, download, trust_remote_code, as_json)
    loaded, texts, max_length = _load(model, model_dir, corpus, n_texts, max_length, route)
    with flags("by"), progress("pruning: model runs", None, quiet=as_json) as update:
        result = prune_by_importance(
            loaded, texts, seed=seed, max_length=max_length, on_step=update, by=by
        )
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


@model_app.command()
def ablate(
    heads: str = typer.Option(
        ...,
        "--ablate",
        help="Heads to ablate: LAYER.HEAD or a whole K/V group LAYER.kvGROUP (3.5,4.kv1).",
    ),
    mode: str = typer.Option("zero", "--mode", help="zero, mean or resample."),
    model: str | None = MODEL,
    model_dir: Path | None = MODEL_DIR,
    backend: str | None = BACKEND,
    download: bool = DOWNLOAD,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    out: Path = OUT_ABLATE,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """The model's loss with and without the --ablate heads (their outputs before W_O)."""
    from headlab.heads.ablation import ablation_effect, check_mode, parse_ablation

    with flags("mode", heads="--ablate"):
        chosen, groups = parse_ablation(heads)
        check_mode(mode)
    claim_analysis("ablate", out, force)
    route = Route(backend, download, trust_remote_code, as_json)
    loaded, texts, max_length = _load(model, model_dir, corpus, n_texts, max_length, route)
    # ablation_effect checks the heads against the model before its first pass
    with flags(heads="--ablate"), progress("ablation: passes", 2, quiet=as_json) as update:
        result = ablation_effect(
            loaded, texts, chosen, mode=mode, max_length=max_length, on_step=update,
            kv_groups=groups,
        )  # fmt: skip
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


@model_app.command()
def generate(
    prompt: str = typer.Argument(..., help="The text to continue."),
    model: str = typer.Option(
        "smollm2", "--model", help="smollm2 (default), a decoder's path or a hub id."
    ),
    backend: str | None = BACKEND,
    download: bool = DOWNLOAD,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", help="Tokens to generate."),
    chat: bool = typer.Option(False, "--chat", help="Wrap the prompt in the chat template."),
    heads: str | None = typer.Option(
        None, "--ablate", help="Heads zeroed in every step: LAYER.HEAD or LAYER.kvGROUP."
    ),
    as_json: bool = AS_JSON,
) -> None:
    """Greedy continuation of PROMPT by a decoder (no sampling: the same output every time)."""
    from headlab.heads.ablation import ablated, check_heads, group_heads, parse_ablation
    from headlab.limits import check_int

    check_int("--max-new-tokens", max_new_tokens, high=4096)
    chosen, groups = [], []
    if heads is not None:
        with flags(heads="--ablate"):
            chosen, groups = parse_ablation(heads)
    if not prompt and not chat:  # before the model loads (SmolLM2: about 20 s on 2 busy cores)
        raise ValueError("PROMPT must be a text to continue, got an empty text")
    from headlab.models import LanguageModel

    loaded = open_model(model, Route(backend, download, trust_remote_code, as_json))
    if not isinstance(loaded, LanguageModel):
        raise ValueError(f"--model must be a language model (it generates), got {loaded.name}")
    text = loaded.chat_prompt(prompt) if chat else prompt
    if heads is not None:
        with flags(heads="--ablate"):
            chosen = sorted({*chosen, *group_heads(loaded, groups)})
            check_heads(loaded, chosen)
    with (
        ablated(loaded, chosen) if chosen else contextlib.nullcontext(),
        progress("generating: tokens", max_new_tokens, quiet=as_json) as update,
    ):
        new = loaded.generate(text, max_new_tokens, on_token=update)
    shown = loaded.decode(new, skip_special=True)  # no <|im_end|>: new_ids keep every token
    if as_json:
        doc = {"model": loaded.name, "prompt": prompt, "new_ids": new, "text": shown}
        if chosen:
            doc["ablated"] = [list(h) for h in chosen]
        print_json(doc, ensure_ascii=False)
        return
    print(shown)  # and a newline: the shell's prompt starts on a line of its own


@model_app.command()
def families(as_json: bool = AS_JSON) -> None:
    """The transformers families that --backend transformers can run.

    Observed in the installed transformers: the families whose text model calls its
    AttentionInterface in one forward on the meta device (about a minute for all), then
    those whose default config showed nothing, and why."""
    from headlab.models.hf.families import observe_families, unobserved_families
    from headlab.models.hf.requirements import require_transformers

    require_transformers()
    with progress("observing each family's forward", None, quiet=as_json) as update:
        seen = observe_families(on_step=update)
    names = [family for family, observed in seen.items() if observed.calls]
    unobserved = unobserved_families(seen)
    if as_json:
        print_json({"families": names, "not_observed": unobserved})
        return
    print("\n".join(names))
    if unobserved:
        print(f"not observed ({len(unobserved)}; a checkpoint's own config may still run):")
        print("\n".join(f"  {family}: {why}"[:80] for family, why in unobserved.items()))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.add_typer(model_app, name="model")

"""``headlab model heads|collapse|importance|prune``: analyses of a trained encoder's heads."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from headlab.cli.app import app
from headlab.locations import model_results

model_app = typer.Typer(
    help="Analyse the heads of a trained encoder (default: the packaged all-MiniLM-L6-v2).",
    no_args_is_help=True,
)
app.add_typer(model_app, name="model")

MODEL_DIR = typer.Option(None, "--model-dir", help="BERT model directory (default: packaged).")
CORPUS = typer.Option(None, "--corpus", help="Text file, one text per line (default: stdlib).")
N_TEXTS = typer.Option(300, "--n-texts", help="Number of texts to use.")
MAX_LENGTH = typer.Option(
    None, "--max-length", help="Tokens kept per text [default: 128, or the model's positions]."
)
AS_JSON = typer.Option(False, "--json", help="Print the results document as JSON.")


def _out(name: str) -> typer.models.OptionInfo:
    return typer.Option(model_results(name), "--out", help="Results file (JSON).")


OUT_HEADS, OUT_COLLAPSE = _out("heads"), _out("collapse")
OUT_IMPORTANCE, OUT_PRUNE = _out("importance"), _out("prune")
FIGURE = typer.Option(None, "--figure", help="Write a layers x heads PNG grid.")
FORCE = typer.Option(
    False, "--force", help="Replace --out (and --figure) even if it is not this analysis' file."
)


def _claim(analysis: str, out: Path, force: bool, figure: Path | None = None) -> None:
    """Check the output paths before any work (they are checked again when written)."""
    from headlab.output_policy import Kind, check_output

    check_output(out, Kind.json(f"model-{analysis}"), force=force)
    if figure is not None:
        check_output(figure, Kind.png(f"model-{analysis}"), force=force, option="--figure")


def _load(model_dir: Path | None, corpus: Path | None, n_texts: int, max_length: int | None):
    """(encoder, texts, max_length): all inputs checked before any analysis runs."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from headlab.limits import check_int
    from headlab.models import default_corpus, load_encoder, read_corpus

    if n_texts <= 0:
        raise ValueError(f"--n-texts must be positive, got {n_texts}")
    check_int("--n-texts", n_texts, high=10**6)
    if max_length is not None:
        check_int("--max-length", max_length, low=2)
    encoder = load_encoder(model_dir)
    positions = encoder.model.config.max_position_embeddings
    if max_length is None:
        max_length = min(128, positions)
    check_int("--max-length", max_length, low=2, high=positions)
    texts = default_corpus(n_texts) if corpus is None else read_corpus(corpus, n_texts)
    return encoder, texts, max_length


def _emit(
    analysis: str, document: dict, out: Path, force: bool, as_json: bool, table: Table
) -> None:
    from headlab.heads import write_json

    written = write_json(out, document, f"model-{analysis}", force=force)
    if as_json:
        print(json.dumps(written, indent=1))
    else:
        Console(width=None if sys.stdout.isatty() else 160).print(table)
        print(f"wrote {out}")


def _grid(title: str, values: list[list[float]], fmt: str = "{:.2f}") -> Table:
    table = Table(title=title)
    table.add_column("layer", justify="right")
    for h in range(max(len(row) for row in values)):
        table.add_column(f"h{h}", justify="right")
    for layer, row in enumerate(values):
        table.add_row(str(layer), *(fmt.format(v) for v in row))
    return table


@model_app.command()
def heads(
    model_dir: Path | None = MODEL_DIR,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    metric: str = typer.Option("entropy", "--metric", help="Metric shown in the table."),
    figure: Path | None = FIGURE,
    out: Path = OUT_HEADS,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """Per-head attention statistics over the corpus (entropy, max weight, [CLS], [SEP], ...)."""
    from headlab.heads import head_statistics
    from headlab.heads.statistics import METRICS

    if metric not in METRICS:
        raise ValueError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    _claim("heads", out, force, figure)
    encoder, texts, max_length = _load(model_dir, corpus, n_texts, max_length)
    result = head_statistics(encoder, texts, max_length=max_length)
    if figure is not None:
        from headlab.heads.figure import write_grid_figure

        write_grid_figure(result, figure, force=force)
    title = f"{metric} per head, {result.model}, {result.n_texts} texts"
    _emit("heads", result.to_dict(), out, force, as_json, _grid(title, result.metrics[metric]))


@model_app.command()
def collapse(
    model_dir: Path | None = MODEL_DIR,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    out: Path = OUT_COLLAPSE,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """The same weights viewed with fewer heads: all layers, then one layer at a time."""
    from headlab.heads import collapse_heads

    _claim("collapse", out, force)
    encoder, texts, max_length = _load(model_dir, corpus, n_texts, max_length)
    counts = tuple(h for h in (1, 2, 3, 4, 6, 12, encoder.num_heads) if encoder.d_model % h == 0)
    result = collapse_heads(encoder, texts, tuple(sorted(set(counts))), max_length=max_length)
    table = Table(title=f"Collapse, {result.model}, {result.n_texts} texts")
    for col in ("layers", "heads", "mean cosine", "NN agreement"):
        table.add_column(col, justify="right")
    for r in result.all_layers + result.per_layer:
        where = "all" if r.layer is None else str(r.layer)
        table.add_row(where, str(r.num_heads), f"{r.mean_cosine:.4f}", f"{r.nn_agreement:.3f}")
    _emit("collapse", result.to_dict(), out, force, as_json, table)


@model_app.command()
def importance(
    model_dir: Path | None = MODEL_DIR,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    temperature: float = typer.Option(0.05, "--temperature", help="InfoNCE temperature."),
    out: Path = OUT_IMPORTANCE,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """Michel et al. head importance E|dL/d xi_h| (contrastive halves objective)."""
    from headlab.heads import head_importance
    from headlab.limits import check_finite

    check_finite("--temperature", temperature, positive=True)
    _claim("importance", out, force)
    encoder, texts, max_length = _load(model_dir, corpus, n_texts, max_length)
    result = head_importance(encoder, texts, temperature=temperature, max_length=max_length)
    title = f"Importance (normalised per layer), {result.model}, {result.n_texts} texts"
    _emit("importance", result.to_dict(), out, force, as_json, _grid(title, result.importance))


@model_app.command()
def prune(
    model_dir: Path | None = MODEL_DIR,
    corpus: Path | None = CORPUS,
    n_texts: int = N_TEXTS,
    max_length: int | None = MAX_LENGTH,
    seed: int = typer.Option(0, "--seed", help="Seed of the random pruning order."),
    out: Path = OUT_PRUNE,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """Remove heads in 10% steps, by importance and at random; measure each pruned model."""
    from headlab.heads import head_importance, prune_curve

    _claim("prune", out, force)
    encoder, texts, max_length = _load(model_dir, corpus, n_texts, max_length)
    ranking = head_importance(encoder, texts, max_length=max_length).ranking()
    result = prune_curve(encoder, texts, ranking, seed=seed, max_length=max_length)
    table = Table(title=f"Pruning, {result.model}, {result.n_texts} texts")
    for col in ("order", "pruned", "heads", "params", "latency ms", "mean cosine", "NN agree"):
        table.add_column(col, justify="right")
    for s in result.steps:
        table.add_row(
            s.order,
            f"{s.fraction_pruned:.0%}",
            str(s.heads_pruned),
            str(s.params),
            f"{s.latency_ms:.1f}",
            f"{s.mean_cosine:.4f}",
            f"{s.nn_agreement:.3f}",
        )
    _emit("prune", result.to_dict(), out, force, as_json, table)

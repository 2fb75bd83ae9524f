"""``headlab redundancy``: how much the heads of a trained model share their key/query spaces."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from headlab.cli.model_source import ModelChoice, model_source, open_model
from headlab.cli.outputs import AS_JSON, FIGURE, FORCE, claim, write_outputs
from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.results.locations import why_results

OUT = typer.Option(why_results("redundancy"), "--out", help="Results file (JSON).")


@model_source(default="minilm", help="minilm, smollm2, a model's path or a hub id.", backend=False)
def redundancy(
    source: ModelChoice,
    ranks: str = typer.Option(
        "", "--ranks", help="Shared key/query ranks k [default: H*d_head / 1, 2, 4, 8, 16]."
    ),
    n_texts: int = typer.Option(64, "--n-texts", help="Texts the variants are judged on."),
    max_length: int = typer.Option(64, "--max-length", help="Tokens kept per text."),
    out: Path = OUT,
    figure: Path | None = FIGURE,
    force: bool = FORCE,
    as_json: bool = AS_JSON,
) -> None:
    """How much a model's heads share their key/query spaces.

    The spectrum and effective rank of each layer's W_Q_i^T W_K_i, and the model with every
    layer's keys and queries read through shared rank-k subspaces (no retraining).
    """
    from headlab.heads.redundancy import check_ranks, measure_redundancy
    from headlab.heads.requests import CorpusRequest

    with flags("n_texts", "max_length", "ranks"):
        request = CorpusRequest(n_texts=n_texts, max_length=max_length)
        chosen = check_ranks(int_list(ranks, "--ranks")) if ranks else None
        texts = request.texts()  # its size is known before the model loads
    claim("redundancy", out, force=force, figure=figure)
    loaded = open_model(source, quiet=as_json)
    with flags("max_length"):
        max_length = request.length_for(loaded.max_positions)
    with flags("ranks"), progress("redundancy: layers and ranks", None, quiet=as_json) as update:
        result = measure_redundancy(
            loaded, texts, ranks=chosen, max_length=max_length, on_step=update
        )
    from headlab.report.why_figures import redundancy_figure

    written = write_outputs(
        "redundancy",
        result,
        out,
        figure=figure,
        draw=redundancy_figure,
        force=force,
        as_json=as_json,
    )
    if written is None:
        return
    console = Console()
    console.print(
        f"{result.model}: effective rank of [B_1 | ... | B_H] per layer (of {result.qk_width}): "
        + " ".join(f"{layer.effective_rank:.0f}" for layer in result.layers),
        highlight=False,
    )
    title = "every layer's key/query cut to a shared rank k"
    table = Table(title=title, title_justify="left", min_width=len(title))  # title on one line
    keys = list(result.curve[0].measures)
    for col in ("k", "cut", *keys):
        table.add_column(col, justify="right")
    for row in result.curve[1:]:
        cut = f"{result.qk_width / row.rank:.1f}x"
        table.add_row(str(row.rank), cut, *(f"{row.measures[k]:.4g}" for k in keys))
    console.print(table)
    print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command()(redundancy)

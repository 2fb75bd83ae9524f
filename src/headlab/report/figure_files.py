"""The report's figures written as PNG files by the commands (``model heads --figure``,
``sweep plot``): the same figure functions as the page, under the output policy."""

from __future__ import annotations

from pathlib import Path

from headlab.report.figures import heads_grid, sweep_figure
from headlab.report.png_files import save_figure
from headlab.results.jsonl_store import read_rows
from headlab.results.output_policy import Kind, check_output
from headlab.results.sweep_summary import summarize

SWEEP_FIGURE_KIND = Kind.png("sweep-plot")
HEADS_FIGURE_KIND = Kind.png("model-heads")
KV_BUDGET_FIGURE_KIND = Kind.png("model-kv-budget")
LONG_CONTEXT_FIGURE_KIND = Kind.png("model-long-context")


def write_heads_figure(heads: dict, path: str | Path, *, force: bool = False) -> Path:
    """``HeadStatistics.to_dict()`` -> ``heads_grid`` saved atomically to ``path``."""
    return save_figure(heads_grid(heads), path, HEADS_FIGURE_KIND, force=force, dpi=100)


def write_kv_budget_figure(result, path: str | Path, *, force: bool = False) -> Path:
    """``KVBudgetResult`` -> ``kv_budget_figure`` saved atomically to ``path``."""
    from headlab.report.long_context_figures import kv_budget_figure

    return save_figure(kv_budget_figure(result), path, KV_BUDGET_FIGURE_KIND, force=force, dpi=110)


def write_roles_figure(result, path: str | Path, *, force: bool = False) -> Path:
    """``LongContextResult`` with roles -> ``roles_figure`` saved atomically to ``path``."""
    from headlab.report.long_context_figures import roles_figure

    return save_figure(roles_figure(result), path, LONG_CONTEXT_FIGURE_KIND, force=force, dpi=110)


def plot_sweep(results: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Final accuracy and loss (mean +- std over seeds) against head count, per task -> PNG.

    FileNotFoundError when ``results`` is missing; ValueError when it has no finished run;
    OutputRefused when ``out`` is not a path headlab may write a sweep figure to (the results
    file itself, a user's file: checked before plotting).
    """
    check_output(out, SWEEP_FIGURE_KIND, force=force, argument="out")
    results = Path(results)
    if not results.is_file():
        raise FileNotFoundError(f"results file not found: {results}")
    summary = summarize(read_rows(results))
    if not summary:
        raise ValueError(f"{results} holds no finished run, expected at least one")
    figure = sweep_figure(summary)
    return save_figure(figure, out, SWEEP_FIGURE_KIND, force=force, argument="out", dpi=110)

"""The figure of one head's pair matrix over all its queries (``PairsOverQueriesResult``): the
matrix framed on its strongest components as a heatmap, its two marginals as bars (the pair
split's drawing: score_split_figures.py), and where each query's attended key lies. Draws what
the result holds; measures nothing."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from headlab.report.figures import style_axes
from headlab.report.score_split_figures import marginal_bars, pair_heatmap
from headlab.results.pairs_over_queries_result import PairsOverQueriesResult


def pairs_over_queries_figure(result: PairsOverQueriesResult) -> Figure:
    fig = Figure(figsize=(11, 8.2))
    grid = fig.add_gridspec(2, 3, height_ratios=[1.25, 1], hspace=0.45, wspace=0.55)
    model = result.model.replace("$", r"\$")  # matplotlib reads $...$ as math
    title = (
        f"{model} head {result.layer}.{result.head}\nthe pair matrix summed over "
        f"{len(result.keys)} queries at their attended keys (total {result.total:.5g})"
    )
    heat = fig.add_subplot(grid[0, 0:2])
    pair_heatmap(fig, heat, result.pair, result.pair_rows, result.pair_cols, title)
    names = result.components
    marginal_bars(fig.add_subplot(grid[0, 2]), names, result.key_marginal, "key side, summed")
    marginal_bars(fig.add_subplot(grid[1, 2]), names, result.query_marginal, "query side, summed")
    _attended(fig, fig.add_subplot(grid[1, 0:2]), result)
    return fig


def _attended(fig, ax, result: PairsOverQueriesResult) -> None:
    """Each query's attended key (a point at (query, key)), coloured by its raw score."""
    queries = np.arange(len(result.keys))
    size = float(np.clip(4000 / len(queries), 2, 16))  # dots that neither vanish nor merge
    points = ax.scatter(queries, result.keys, c=result.raw, s=size, cmap="viridis", linewidths=0)
    ax.plot([0, queries[-1]], [0, queries[-1]], color="#999", lw=0.5)  # the query itself
    ax.set_xlabel("query position", fontsize=8)
    ax.set_ylabel("attended key position", fontsize=8)
    ax.set_title(
        "where each query attends (on the diagonal: itself; colour: its raw score q.k)",
        fontsize=9,
    )
    fig.colorbar(points, ax=ax, fraction=0.04, pad=0.02).ax.tick_params(labelsize=7)
    style_axes(ax)


__all__ = ["pairs_over_queries_figure"]

"""The figure of a score split (``ScoreSplitResult``): one (query, key) pair's pair matrix as a
heatmap, its two marginals as bars, and the source tokens of the strongest key-side head on the
text, or on an image, on its patch grid (the class token and the registers named beside it).
Draws what the result holds; measures nothing."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from headlab.report.displays.score_split_display import strongest_pair
from headlab.report.figures import style_axes
from headlab.results.score_split_result import ScoreSplitResult

#: Bars per side.
BARS = 10
#: Tokens of the text shown before the key, and after it (an encoder's or a cross-attention's
#: heads read the positions after it too).
AROUND, AFTER = 24, 12


def pair_heatmap(
    fig,
    ax,
    grid: list[list[float]],
    rows: list[str],
    cols: list[str],
    title: str,
    held: str = "the key position's stream",
) -> None:
    """A framed pair matrix ``grid`` (rows: query side, columns: key side, which reads
    ``held``) as a heatmap on ``ax`` under ``title``, red adding to the score, with its colour
    bar."""
    matrix = np.asarray(grid)
    bound = float(np.abs(matrix).max()) or 1.0
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=60, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_xlabel(f"key side (what {held} holds)", fontsize=8)
    ax.set_ylabel("query side", fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02).ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9)


def marginal_bars(ax, names: list[str], values: list[float], title: str) -> None:
    """The ``BARS`` largest of ``values`` (one per name in ``names``) as bars on ``ax``."""
    order = np.argsort(-np.abs(values))[:BARS][::-1]
    shown = [values[i] for i in order]
    colours = ["#c0504d" if v >= 0 else "#3a6ea5" for v in shown]  # as the heatmap: red adds
    ax.barh(range(len(order)), shown, color=colours)
    ax.set_yticks(range(len(order)), [names[i] for i in order], fontsize=8)
    ax.axvline(0, color="#555", lw=0.6)
    ax.xaxis.set_major_locator(MaxNLocator(4))  # sums over thousands of queries stay apart
    ax.set_title(title, fontsize=9)
    style_axes(ax)


def _token(text: str, most: int = 10) -> str:
    text = text.replace("\n", "\\n").replace("$", r"\$")
    return text if len(text) <= most else text[: most - 1] + "…"


def score_split_figure(result: ScoreSplitResult) -> Figure:
    pair = strongest_pair(result)
    tokens = result.tokens[pair.batch]
    fig = Figure(figsize=(11, 8.2))
    grid = fig.add_gridspec(2, 3, height_ratios=[1.25, 1], hspace=0.6, wspace=0.55)
    query, key = _token(tokens[pair.query]), _token(result.key_labels(pair.batch)[pair.key])
    score = "" if pair.score is None else f", score {pair.score:.3g}"
    title = (
        f"{result.model} head {result.layer}.{result.head}: query {pair.query} '{query}' -> "
        f"key {pair.key} '{key}' (raw {pair.raw:.3g}{score})"
    )
    held = "the key position's stream" if result.key_components is None else "the encoder's stream"
    heat = fig.add_subplot(grid[0, 0:2])
    pair_heatmap(fig, heat, pair.pair, pair.pair_rows, pair.pair_cols, title, held)
    marginal_bars(fig.add_subplot(grid[0, 2]), result.key_names(), pair.key_marginal, "key side")
    marginal_bars(fig.add_subplot(grid[1, 2]), result.components, pair.query_marginal, "query side")
    text = fig.add_subplot(grid[1, 0:2])
    text.set_axis_off()
    if pair.sources and result.grid is not None:
        text.set_axis_on()
        _source_grid(fig, text, result, pair, pair.sources[0])
    elif pair.sources:
        source = pair.sources[0]
        labels = result.key_labels(pair.batch)  # a cross-attention's: the source's tokens
        _source_text(text, labels, pair, source.component, source.positions, source.values)
    else:
        text.text(
            0,
            0.5,
            "no head component split by source (no head adds to the key side, or none was "
            "asked for)",
            fontsize=8,
        )
    return fig


def _source_grid(fig, ax, result: ScoreSplitResult, pair, source) -> None:
    """The source split of head ``source.component`` laid out on the image's patches, row by
    row; the class token's and the registers' parts in the title; the key's patch outlined
    (solid), the query's (dashed)."""
    from matplotlib.patches import Rectangle

    rows, cols = result.grid
    first = result.first_patch
    values = dict(zip(source.positions, source.values, strict=True))
    grid = np.array([values.get(first + p, np.nan) for p in range(rows * cols)]).reshape(rows, cols)
    bound = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
    image = ax.imshow(grid, cmap="RdBu_r", vmin=-(bound or 1.0), vmax=bound or 1.0)
    bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, format="%.2g")
    bar.ax.tick_params(labelsize=7)
    ax.set_xticks([]), ax.set_yticks([])
    for position, style in ((pair.key, "-"), (pair.query, "--")):
        if position >= first:
            r, c = divmod(position - first, cols)
            box = Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, lw=1.6, ls=style, ec="#222")
            ax.add_patch(box)
    before = f"cls {values.get(0, 0.0):+.3g}"
    if first > 1:
        parts = ", ".join(f"{values.get(p, 0.0):+.2g}" for p in range(1, first))
        before += f"; registers {parts}"
    ax.set_title(
        f"key side of head {source.component} at key {pair.key}, by the patch it read "
        f"({sum(source.values):+.3g} in all)",
        fontsize=9,
    )
    ax.set_xlabel(
        f"red adds, blue takes away; key's patch outlined, query's dashed\n{before}",
        fontsize=8,
    )


def _source_text(ax, tokens, pair, component, positions, values) -> None:
    """The tokens around the key, each shaded by what head ``component`` read there."""
    start = max(0, pair.key + 1 - AROUND)
    read = zip(positions, values, strict=True)
    shown = [(p, v) for p, v in read if start <= p <= pair.key + AFTER]
    bound = max((abs(v) for _, v in shown), default=1.0) or 1.0
    ax.set_title(
        f"key side of head {component} at key {pair.key}, by the source token it read "
        f"(red adds to the score, blue takes away; {sum(values):+.3g} in all)",
        fontsize=9,
    )
    x, y = 0.0, 0.85
    for p, v in shown:
        word = _token(tokens[p], 12)
        width = 0.012 * len(word) + 0.02
        if x + width > 1.0:
            x, y = 0.0, y - 0.17
        colour = (
            (1, 1 - min(1, v / bound), 1 - min(1, v / bound))
            if v >= 0
            else (1 - min(1, -v / bound), 1 - min(1, -v / bound), 1)
        )
        weight = "bold" if p == pair.key else "normal"
        ax.text(
            x,
            y,
            word,
            fontsize=8,
            weight=weight,
            family="monospace",
            bbox={"facecolor": colour, "edgecolor": "#999", "pad": 1.5, "lw": 0.3},
            transform=ax.transAxes,
        )
        x += width


__all__ = ["marginal_bars", "pair_heatmap", "score_split_figure", "strongest_pair"]

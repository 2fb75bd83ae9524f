"""Matplotlib figures of the report: embedded in the page as PNG and written with ``--png DIR``.

Figures are built on ``matplotlib.figure.Figure`` (no pyplot): no global state, no GUI backend.
Every function takes the plain data the page uses and returns a Figure.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from headlab.report.png_files import figure_png
from headlab.results.quality_measures import SHARE_MEASURES
from headlab.results.sweep_summary import SummaryRow, plot_series

INK = "#1f2933"
GRID = "#d9dee5"
COLOURS = ["#3b6fd8", "#e4572e", "#17a398", "#f3a712", "#8c5ed1", "#6b7a8f"]


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    """Render ``fig`` to PNG bytes (text drawn verbatim, tagged as a report figure)."""
    return figure_png(fig, "report-figure", dpi=dpi, bbox_inches="tight", facecolor="white")


def style_axes(ax) -> None:
    """The report's look for one matplotlib axes: a light grid behind, no top or right spine."""
    ax.grid(True, color=GRID, linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(colors=INK, labelsize=8)


def legend_outside(ax, **kwargs) -> None:
    """The axes' legend to the right of it, so that it never covers data (constrained layout
    makes room for it)."""
    options = {"fontsize": 8, "frameon": False, **kwargs}
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **options)


def heads_grid(heads: dict) -> Figure:
    """model_heads.json data (``HeadStatistics.to_dict()``) -> one layers x heads image per
    detector (scores on [0, 1]; decoders) and per metric (each on its own scale), each with its
    colour bar. Rows of unequal length (pruned layers) are padded blank."""
    panels = [
        (f"{name.replace('_', '-')} (detector)", grid, (0.0, 1.0))
        for name, grid in heads.get("detectors", {}).items()
    ]
    panels += [(name, grid, (None, None)) for name, grid in heads["metrics"].items()]
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(3.2 * cols, 2.6 * rows), layout="constrained")
    for i, (name, layers, (low, high)) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        grid = np.full((len(layers), max(map(len, layers))), np.nan)
        for layer, values in enumerate(layers):
            grid[layer, : len(values)] = values
        image = ax.imshow(grid, cmap="viridis", aspect="auto", vmin=low, vmax=high)
        ax.set_title(name, fontsize=9, color=INK)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.tick_params(labelsize=7)
        for axis in (ax.xaxis, ax.yaxis):  # whole layers and heads only, 30 layers stay readable
            axis.set_major_locator(MaxNLocator(nbins=10, integer=True))
        bar = fig.colorbar(image, ax=ax, shrink=0.8)
        bar.ax.tick_params(labelsize=7)
    fig.suptitle(f"{heads['model']}: heads, averaged over {heads['n_texts']} texts", fontsize=10)
    return fig


def shares(row: dict) -> list[str]:
    """The measures of ``row`` (``headlab.heads.quality``: an encoder's or a decoder's) that are
    shares in [0, 1] (plotted on one axis)."""
    return [key for key in SHARE_MEASURES if key in row]


def _head_axis(ax, counts: list[int]) -> None:
    """A log-2 x axis with ticks at the head counts used, labelled as plain numbers (figures
    are drawn without mathtext, so the log formatter's TeX labels would show raw)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.minorticks_off()


def collapse_curve(collapse: dict) -> Figure:
    """model_collapse.json data -> agreement with the original model when heads are merged."""
    fig = Figure(figsize=(9, 3.2), layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    rows = sorted(collapse["all_layers"], key=lambda r: r["num_heads"])
    h = [r["num_heads"] for r in rows]
    keys = shares(rows[0])
    for key, colour in zip(keys, COLOURS, strict=False):
        ax1.plot(h, [r[key] for r in rows], "o-", color=colour, label=key.replace("_", " "))
    _head_axis(ax1, h)
    ax1.set_xlabel("heads in every layer (same weights)")
    ax1.set_title("all layers viewed with fewer heads", fontsize=9)
    per = sorted(collapse["per_layer"], key=lambda r: r["layer"])
    x = np.arange(len(per))
    width = 0.8 / len(keys)
    for i, (key, colour) in enumerate(zip(keys, COLOURS, strict=False)):
        offset = (i - (len(keys) - 1) / 2) * width
        label = key.replace("_", " ")
        ax2.bar(x + offset, [r[key] for r in per], width, color=colour, label=label)
    ax2.set_xticks(x, [str(r["layer"]) for r in per])
    ax2.set_xlabel("layer viewed as one head (others intact)")
    ax2.set_title("one layer at a time", fontsize=9)
    for ax in (ax1, ax2):
        style_axes(ax)
        ax.set_ylim(min(0.0, ax.get_ylim()[0]), 1.05)
        legend_outside(ax)
    return fig


def prune_curve(prune: dict) -> Figure:
    """model_prune.json data -> quality against the fraction of heads pruned, per order."""
    keys = shares(prune["steps"][0])
    fig = Figure(figsize=(4.5 * len(keys), 3.2), layout="constrained")
    axes = [fig.add_subplot(1, len(keys), i + 1) for i in range(len(keys))]
    by_order: dict[str, list[dict]] = defaultdict(list)
    for step in prune["steps"]:
        by_order[str(step["order"])].append(step)
    for colour, (order, steps) in zip(COLOURS, sorted(by_order.items()), strict=False):
        steps.sort(key=lambda s: s["fraction_pruned"])
        x = [s["fraction_pruned"] for s in steps]
        for ax, key in zip(axes, keys, strict=True):
            ax.plot(x, [s[key] for s in steps], "o-", color=colour, label=f"{order} order")
    for ax, key in zip(axes, keys, strict=True):
        style_axes(ax)
        ax.set_xlabel("fraction of heads pruned")
        ax.set_title(key.replace("_", " "), fontsize=9)
        legend_outside(ax)
    return fig


def sweep_figure(summary: list[SummaryRow]) -> Figure:
    """Summarised sweep (``experiments.summary.summarize``) -> final accuracy (top) and loss
    (bottom), mean +- std over seeds, against the head count: one column per task, one line per
    K/V setting (``plot_series``), ticks at the head counts used, legend outside the axes."""
    tasks = sorted({s.task for s in summary})
    fig = Figure(figsize=(4.2 * len(tasks) + 1.6, 6.0), layout="constrained")
    axes = fig.subplots(2, len(tasks), squeeze=False)
    labels: dict[str, object] = {}
    for col, task in enumerate(tasks):
        ticks = sorted({s.num_heads for s in summary if s.task == task})
        for colour, (kv, rows) in zip(
            COLOURS * 4, plot_series(summary, task).items(), strict=False
        ):
            label = "G = H" if kv is None else kv if isinstance(kv, str) else f"G = {kv}"
            hs = [r.num_heads for r in rows]
            for ax, mean, std in (
                (axes[0][col], [r.accuracy_mean for r in rows], [r.accuracy_std for r in rows]),
                (axes[1][col], [r.loss_mean for r in rows], [r.loss_std for r in rows]),
            ):
                line = ax.errorbar(hs, mean, yerr=std, marker="o", capsize=3, color=colour)
                labels.setdefault(label, line)
        for row, name in enumerate(("accuracy", "loss")):
            ax = axes[row][col]
            _head_axis(ax, ticks)
            style_axes(ax)
            ax.set_xlabel("heads (d_model fixed)", fontsize=8)
            ax.set_ylabel(f"final {name}\n(mean ± std over seeds)", fontsize=8)
        axes[0][col].set_title(task, fontsize=9)
    if len(labels) > 1:
        fig.legend(
            list(labels.values()),
            list(labels),
            loc="outside right upper",
            fontsize=8,
            frameon=False,
            title="K/V heads",
            title_fontsize=8,
        )
    return fig


def coupling_figure(coupling: dict) -> Figure:
    """``CouplingSummary.to_dict()`` -> the coupling matrices side by side on one colour scale,
    with one colour bar, so that "zero off the diagonal" and "coupled" compare at a glance."""
    matrices = coupling["matrices"]
    top = max(float(np.max(m["matrix"])) for m in matrices) or 1.0
    fig = Figure(figsize=(3.3 * len(matrices) + 1.2, 3.4), layout="constrained")
    axes = fig.subplots(1, len(matrices), squeeze=False)[0]
    for ax, item in zip(axes, matrices, strict=True):
        matrix = np.asarray(item["matrix"])
        image = ax.imshow(matrix, cmap="magma", vmin=0.0, vmax=top)
        blocks = range(len(matrix))
        ax.set_xticks(blocks, [str(j) for j in blocks])
        ax.set_yticks(blocks, [str(i) for i in blocks])
        ax.set_title(item["title"], fontsize=9, color=INK)
        ax.set_xlabel("upstream gradient changed in block j", fontsize=8)
        ax.set_ylabel("W_Q/W_K/W_V block i", fontsize=8)
        ax.tick_params(labelsize=7)
    bar = fig.colorbar(image, ax=list(axes), shrink=0.85)
    bar.set_label("norm of the gradient change", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return fig


def _token_ticks(ax, tokens: list[str], most: int = 24) -> None:
    """Every n-th token as a tick label on both axes (at most ``most`` labels), cut to 10
    characters."""
    step = max(1, -(-len(tokens) // most))
    where = list(range(0, len(tokens), step))
    names = [t if len(t) <= 10 else t[:9] + "…" for t in (tokens[i] for i in where)]
    ax.set_xticks(where, names, rotation=90, fontsize=6)
    ax.set_yticks(where, names, fontsize=6)


def attention_figure(title: str, tokens: list[str], views: list) -> Figure:
    """AttentionViews (layer 0 of each, one token a cell) -> every head as a small image with
    its tokens on the axes (queries as rows, keys as columns) and one colour bar, weight 0 to 1."""
    panels = [
        (f"{v.name}: head {h}" if v.weights.shape[1] > 1 else v.name, v.weights[0, h])
        for v in views
        for h in range(v.weights.shape[1])
    ]
    cols = min(5, len(panels))
    rows = -(-len(panels) // cols)
    labelled = len(tokens) == panels[0][1].shape[-1]
    fig = Figure(figsize=(2.6 * cols + 0.8, 2.8 * rows + 0.4), layout="constrained")
    axes = []
    for i, (name, w) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        image = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(name, fontsize=8)
        if labelled:
            _token_ticks(ax, tokens)
        else:
            ax.set_xticks([])
            ax.set_yticks([])
        axes.append(ax)
    bar = fig.colorbar(image, ax=axes, shrink=0.6)
    bar.set_label("attention weight (rows: queries, columns: keys)", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig

"""Matplotlib figures of the report: embedded in the page as PNG and written with ``--png DIR``.

Figures are built on ``matplotlib.figure.Figure`` (no pyplot): no global state, no GUI backend.
Every function takes the plain data the page uses and returns a Figure.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from matplotlib.figure import Figure

from headlab.files import figure_png

INK = "#1f2933"
GRID = "#d9dee5"
COLOURS = ["#3b6fd8", "#e4572e", "#17a398", "#f3a712", "#8c5ed1", "#6b7a8f"]


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    """Render ``fig`` to PNG bytes (text drawn verbatim, tagged as a report figure)."""
    return figure_png(fig, "report-figure", dpi=dpi, bbox_inches="tight", facecolor="white")


def _style(ax) -> None:
    ax.grid(True, color=GRID, linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(colors=INK, labelsize=8)


def heads_grid(heads: dict) -> Figure:
    """model_heads.json data -> one layers x heads image per metric."""
    metrics = heads["metrics"]
    names = list(metrics)
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(3.2 * cols, 2.6 * rows), layout="constrained")
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        grid = np.asarray(metrics[name])
        image = ax.imshow(grid, cmap="viridis", aspect="auto")
        ax.set_title(name, fontsize=9, color=INK)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.tick_params(labelsize=7)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(f"{heads['model']}: heads, averaged over {heads['n_texts']} texts", fontsize=10)
    return fig


# The measures of a model variant (headlab.heads.quality): an encoder's and a decoder's.
SHARES = ("mean_cosine", "nn_agreement", "next_token_agreement")


def shares(row: dict) -> list[str]:
    """The measures of ``row`` that are shares in [0, 1] (plotted on one axis)."""
    return [key for key in SHARES if key in row]


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
        _style(ax)
        ax.set_ylim(min(0.0, ax.get_ylim()[0]), 1.05)
        ax.legend(fontsize=8, frameon=False)
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
        _style(ax)
        ax.set_xlabel("fraction of heads pruned")
        ax.set_title(key.replace("_", " "), fontsize=9)
        ax.legend(fontsize=8, frameon=False)
    return fig


def sweep_curve(finals: list[dict]) -> Figure:
    """Final sweep records -> accuracy against heads, one line per task (mean over seeds)."""
    by_task: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in finals:
        cfg = record["config"]
        by_task[str(cfg["task"])][int(cfg["num_heads"])].append(float(record["accuracy"]))
    fig = Figure(figsize=(5.5, 3.4), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for colour, (task, points) in zip(COLOURS * 4, sorted(by_task.items()), strict=False):
        heads = sorted(points)
        means = [float(np.mean(points[h])) for h in heads]
        ax.plot(heads, means, "o-", color=colour, label=task)
        for h in heads:
            ax.scatter([h] * len(points[h]), points[h], s=10, color=colour, alpha=0.35)
    _head_axis(ax, sorted({h for points in by_task.values() for h in points}))
    ax.set_xlabel("heads (same d_model)")
    ax.set_ylabel("final accuracy")
    _style(ax)
    ax.legend(fontsize=8, frameon=False)
    return fig


def coupling_figure(matrices: list[dict]) -> Figure:
    """[{title, matrix (h, h)}] -> the gradient coupling matrices side by side."""
    fig = Figure(figsize=(3.6 * len(matrices), 3.2), layout="constrained")
    for i, item in enumerate(matrices):
        ax = fig.add_subplot(1, len(matrices), i + 1)
        image = ax.imshow(np.asarray(item["matrix"]), cmap="magma")
        ax.set_title(item["title"], fontsize=9)
        ax.set_xlabel("upstream gradient changed in block j", fontsize=8)
        ax.set_ylabel("W_Q/W_K/W_V block i", fontsize=8)
        fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def attention_figure(title: str, tokens: list[str], views: list) -> Figure:
    """HeatmapViews (layer 0 of each) -> every head as a small image, for papers and slides."""
    panels = [(v.name, h, v.weights[0, h]) for v in views for h in range(v.weights.shape[1])]
    cols = min(5, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(2.4 * cols, 2.5 * rows), layout="constrained")
    for i, (name, h, w) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.imshow(w, cmap="viridis", vmin=0)
        ax.set_title(f"{name}: head {h}" if "head" in name else name, fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        if len(tokens) <= 16:
            ax.set_yticks(range(len(tokens)), tokens, fontsize=6)
    fig.suptitle(title, fontsize=10)
    return fig

"""Figures of one long text's heads and of a KV budget: what ``model heads --text-file`` and
``model kv-budget`` measured, drawn (the report embeds them, ``--figure`` writes them).

    roles_figure       layers x heads grids of retrieval, window error and first-token weight,
                       and the role of each head
    maps_figure        for a few heads: the blocked attention map and the attention each key
                       receives along the whole text
    kv_budget_figure   budget (share of K/V groups windowed) against perplexity and copy
                       accuracy: the chosen plan, random plans (mean and range), the opposite
                       ranking, the full model
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from headlab.report.figures import COLOURS, INK, legend_outside, style_axes

if TYPE_CHECKING:
    from headlab.results.kv_budget_result import KVBudgetResult
    from headlab.results.long_context_result import LongContextResult

# retrieval red and sink blue, the two roles a reader compares, far apart in hue and lightness
ROLE_COLOURS = {
    "retrieval": COLOURS[1],
    "copy": COLOURS[4],
    "sink": COLOURS[0],
    "local": COLOURS[2],
    "mixed": "#d9dee5",
}


def _grid(
    ax,
    values: list[list[float]],
    title: str,
    fig: Figure,
    cmap: str = "viridis",
    top: float | None = None,
) -> None:
    """A layers x heads grid; ``top`` caps the colour scale (larger values drawn at the cap)."""
    heads = max(len(row) for row in values)
    grid = np.full((len(values), heads), np.nan)
    for layer, row in enumerate(values):
        grid[layer, : len(row)] = row
    capped = top is not None and np.nanmax(grid) > top
    image = ax.imshow(
        grid, aspect="auto", cmap=cmap, interpolation="nearest", vmax=top if capped else None
    )
    ax.set_title(title, fontsize=9)
    _layer_head_axes(ax)
    fig.colorbar(image, ax=ax, fraction=0.05, extend="max" if capped else "neither")


def _layer_head_axes(ax) -> None:
    """Integer ticks: heads and layers are counted, not measured."""
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def roles_figure(result: LongContextResult) -> Figure:
    """Grids of the role scores and the roles (needs ``result.roles``)."""
    roles = result.roles
    first = result.statistics.metrics[result.statistics.first_token]
    panels = [("weight on the first token", first, "viridis", None)]
    if roles.retrieval is not None:
        panels.insert(0, ("retrieval score (Wu et al.)", roles.retrieval, "magma", None))
    if roles.window_error is not None:  # above 1: farther from the output than no output is
        title = f"window error ||o - o_w|| / ||o|| ({roles.sinks} sinks + {roles.window})"
        worst = max(max(row) for row in roles.window_error)
        if worst > 1.0:
            title += f"\nup to {worst:.2f}; colours stop at 1"
        panels.append((title, roles.window_error, "cividis_r", 1.0))
    width = len(panels) + (roles.roles is not None)
    fig = Figure(figsize=(3.2 * width, 4.2), layout="constrained")
    axes = [fig.add_subplot(1, width, i + 1) for i in range(width)]
    for ax, (title, values, cmap, top) in zip(axes, panels, strict=False):
        _grid(ax, values, title, fig, cmap, top)
    if roles.roles is not None:
        names = list(ROLE_COLOURS)
        index = [[names.index(r) for r in row] for row in roles.roles]
        ax = axes[-1]
        ax.imshow(
            np.array(index),
            aspect="auto",
            cmap=ListedColormap(list(ROLE_COLOURS.values())),
            vmin=-0.5,
            vmax=len(names) - 0.5,
            interpolation="nearest",
        )
        counts = roles.counts()
        for name, colour in ROLE_COLOURS.items():
            ax.plot([], [], "s", color=colour, label=f"{name} ({counts[name]})")
        ax.set_title("role of each head", fontsize=9)
        _layer_head_axes(ax)
        legend_outside(ax, fontsize=7)
    return fig


def chosen_heads(result: LongContextResult, count: int = 4) -> list[tuple[int, int, str]]:
    """(layer, head, why) of a few heads worth drawing: the strongest retrieval head, the head
    with the lowest window error, the strongest sink, the most concentrated heavy hitter."""
    picks: list[tuple[int, int, str]] = []

    def best(values: list[list[float]] | None, why: str, low: bool = False) -> None:
        if values is None:
            return
        cells = [(v, layer, h) for layer, row in enumerate(values) for h, v in enumerate(row)]
        for v, layer, h in sorted(cells, reverse=not low):
            if all((layer, h) != (p[0], p[1]) for p in picks):
                picks.append((layer, h, f"{why} {v:.2f}"))
                return

    roles = result.roles
    if roles is not None:
        best(roles.retrieval, "retrieval")
        best(roles.window_error, "window error", low=True)
    best(result.statistics.metrics[result.statistics.first_token], "first-token weight")
    best(result.heavy_hitters.top_share, "top-1% share")
    return picks[:count]


def maps_figure(result: LongContextResult, heads: list[tuple[int, int, str]]) -> Figure:
    """For each (layer, head, why): its blocked attention map and its received profile."""
    maps = result.maps
    fig = Figure(figsize=(3.4 * len(heads), 7.2), layout="constrained")
    plain = FuncFormatter(lambda value, _: f"{value:g}")  # text drawn verbatim, no mathtext
    for i, (layer, head, why) in enumerate(heads):
        ax = fig.add_subplot(2, len(heads), i + 1)
        blocked = np.asarray(maps.blocked[layer][head])
        image = ax.imshow(blocked, cmap="viridis", interpolation="nearest")
        ax.set_title(f"layer {layer} head {head}\n{why}", fontsize=8)
        ax.set_xlabel(f"key block ({maps.block} tokens)", fontsize=7)
        ax.set_ylabel("query block", fontsize=7)
        fig.colorbar(image, ax=ax, fraction=0.046)
        ax2 = fig.add_subplot(2, len(heads), len(heads) + i + 1)
        received = np.asarray(maps.received[layer][head])
        floor = max(float(received[received > 0].min()), 1e-3) if (received > 0).any() else 1e-3
        positions = np.arange(len(received)) * maps.bin
        ax2.plot(positions, np.maximum(received, floor), color=COLOURS[0], linewidth=0.8)
        ax2.set_yscale("log")
        ax2.yaxis.set_major_formatter(plain)
        ax2.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
        ax2.set_xlabel(f"key position ({maps.bin} per point)", fontsize=7)
        ax2.set_ylabel("attention received (log)", fontsize=7)
        style_axes(ax2)
    return fig


def kv_budget_figure(result: KVBudgetResult) -> Figure:
    """Budget against perplexity (left) and copy accuracy (right), per kind of plan."""
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    axes = (fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2))
    base = result.baseline()
    budgets = sorted({r.budget for r in result.runs if r.kind != "full"})
    measures = (("perplexity", "perplexity (non-copy tokens)"), ("copy_accuracy", "copy accuracy"))
    for ax, (key, label) in zip(axes, measures, strict=True):
        ax.axhline(getattr(base, key), color=INK, linestyle=":", label="full model")
        for kind, colour, style in (("chosen", COLOURS[2], "o-"), ("opposite", COLOURS[1], "s--")):
            rows = sorted((r for r in result.runs if r.kind == kind), key=lambda r: r.budget)
            ax.plot(
                [r.budget for r in rows],
                [getattr(r, key) for r in rows],
                style,
                color=colour,
                label=f"{kind} (lowest window error first)"
                if kind == "chosen"
                else "opposite ranking",
            )
        means, lows, highs = [], [], []
        for b in budgets:
            values = [getattr(r, key) for r in result.runs if r.kind == "random" and r.budget == b]
            means.append(np.mean(values))
            lows.append(min(values))
            highs.append(max(values))
        ax.plot(budgets, means, "^-", color=COLOURS[0], label="random plans (mean, range)")
        ax.fill_between(budgets, lows, highs, color=COLOURS[0], alpha=0.2)
        saved = {r.budget: r.kv_saved for r in result.runs if r.kind == "chosen"}
        ax.set_xticks(budgets, [f"{b:.2f}\n{saved[b]:.2f}x" for b in budgets])
        ax.set_xlabel("share of K/V groups keeping only sinks + window\n(KV memory saved)")
        ax.set_ylabel(label)
        style_axes(ax)
    axes[0].set_title(
        f"{result.model}, {result.n_tokens} tokens, {result.sinks} sinks + {result.window}",
        fontsize=9,
    )
    legend_outside(axes[1], fontsize=7)
    return fig

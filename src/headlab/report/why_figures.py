"""Figures of the "why heads" measurements (expressivity, specialisation, redundancy).

Each takes the results (``ExpressivityResult``, ``SpecialisationResult``, ``RedundancyResult``, as
measured or as read back through their ``from_dict``) and returns a Figure;
the report embeds them and the commands' ``--figure`` writes them. Axes are linear with ticks at
the measured values (text is drawn verbatim, so no log-scale mathtext labels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from headlab.report.figures import COLOURS, INK, legend_outside, style_axes

if TYPE_CHECKING:
    from headlab.results.expressivity_result import ExpressivityResult
    from headlab.results.redundancy_result import RedundancyResult
    from headlab.results.specialisation_result import Checkpoint, SpecialisationResult


def expressivity_figure(result: ExpressivityResult) -> Figure:
    """KL floor against head size per (targets, n); error of 1 head vs h heads on h offsets."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    dims = sorted({r.head_dim for r in result.rank})
    where = {d: i for i, d in enumerate(dims)}
    keys = sorted({(r.source, r.seq_len) for r in result.rank})
    lengths = sorted({n for _, n in keys})
    for source, n in keys:
        k = lengths.index(n)
        rows = sorted(
            (r for r in result.rank if (r.source, r.seq_len) == (source, n)),
            key=lambda r: r.head_dim,
        )
        style = "o-" if source == "random" else "s--"
        ax1.plot(
            [where[r.head_dim] for r in rows],
            [r.kl for r in rows],
            style,
            color=COLOURS[k % len(COLOURS)],
            label=f"{source}, n={n}",
        )
        if n in where and source == "random":
            ax1.axvline(where[n], color=COLOURS[k % len(COLOURS)], linestyle=":", linewidth=1)
    ax1.set_xticks(range(len(dims)), [str(d) for d in dims])
    ax1.set_xlabel("head size d_head (dotted: d_head = n)")
    ax1.set_ylabel("best mean row KL (nats)")
    ax1.set_title("one head cannot fit every n x n pattern while d_head < n", fontsize=9)
    legend_outside(ax1, fontsize=7)
    style_axes(ax1)
    pats = result.patterns
    labels = [f"{p.num_heads} x {p.head_dim}" for p in pats]
    ax2.bar(labels, [p.relative_error for p in pats], color=COLOURS[: len(pats)])
    for i, p in enumerate(pats):
        ax2.text(
            i,
            p.relative_error,
            f"{p.relative_error:.3f}",
            ha="center",
            va="bottom",
            fontsize=8,
            color=INK,
        )
    blocks = pats[0].blocks if pats else 0
    ax2.set_xlabel("heads x head size (equal parameters)")
    ax2.set_ylabel("relative error (MSE / target power)")
    ax2.set_title(f"copy {blocks} offsets at once: one pattern per head", fontsize=9)
    style_axes(ax2)
    return fig


def _matrix(ax, matrix: np.ndarray, title: str, xlabel: str, ylabel: str) -> None:
    image = ax.imshow(matrix, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(matrix.shape[1]))
    ax.set_yticks(range(matrix.shape[0]))
    ax.set_title(title, fontsize=8, color=INK)
    ax.set_xlabel(xlabel, fontsize=7)
    ax.set_ylabel(ylabel, fontsize=7)
    ax.tick_params(labelsize=6)
    for (i, j), v in np.ndenumerate(matrix):
        ax.text(
            j,
            i,
            f"{v:.2f}",
            ha="center",
            va="center",
            fontsize=6,
            color="white" if v < 0.6 else INK,
        )
    return image


def _drop(checkpoint: Checkpoint) -> np.ndarray:
    """(head, lookup) accuracy lost by removing each head, clipped at 0."""
    base = np.asarray(checkpoint.accuracy)[None, :]
    return np.clip(base - np.asarray(checkpoint.ablated), 0.0, 1.0)


def specialisation_figure(result: SpecialisationResult) -> Figure:
    """Top: the final heads x lookups ablation matrix of each plain run. Bottom: the number of
    distinct serving heads over training (split step marked), and final accuracy of plain
    against talking heads by head count."""
    runs = result.runs
    plain = [r for r in runs if r.attention == "plain"]
    cols = max(len(plain), 2)
    # wide enough for the bottom panels and their legends beside them
    fig = Figure(figsize=(max(2.6 * cols, 9.0), 6.4), layout="constrained")
    grid = fig.add_gridspec(2, cols, height_ratios=[1.2, 1])
    for i, run in enumerate(plain):
        ax = fig.add_subplot(grid[0, i])
        _matrix(
            ax,
            _drop(run.checkpoints[-1]),
            f"{run.num_heads} x {run.head_dim}: accuracy lost",
            "lookup",
            "head ablated",
        )
    half = cols // 2
    ax = fig.add_subplot(grid[1, :half])
    multi = sorted({r.num_heads for r in runs if r.num_heads > 1})
    for run in (r for r in runs if r.num_heads > 1):
        k = multi.index(run.num_heads)
        steps = [c.step for c in run.checkpoints]
        served = [len({h for h in c.served_by if h is not None}) for c in run.checkpoints]
        style = "-" if run.attention == "plain" else "--"
        colour = COLOURS[k % len(COLOURS)]
        ax.plot(steps, served, style, color=colour, label=f"{run.attention} h={run.num_heads}")
        if run.split_step is not None:
            ax.axvline(run.split_step, color=colour, linestyle=":", linewidth=1)
    ax.set_xlabel("training step (dotted: split step)")
    ax.set_ylabel("heads serving a lookup")
    ax.set_yticks(range(0, 5))
    ax.set_title("when the heads divide the 4 lookups", fontsize=9)
    legend_outside(ax, fontsize=6)
    style_axes(ax)
    ax = fig.add_subplot(grid[1, half:])
    counts = sorted({r.num_heads for r in runs})
    width = 0.38
    for j, kind in enumerate(("plain", "talking-heads")):
        acc = {r.num_heads: r.accuracy for r in runs if r.attention == kind}
        xs = [i + (j - 0.5) * width for i, h in enumerate(counts) if h in acc]
        ax.bar(xs, [acc[h] for h in counts if h in acc], width, color=COLOURS[j], label=kind)
    ax.set_xticks(range(len(counts)), [str(h) for h in counts])
    ax.set_xlabel("heads (d_model 64, equal parameters)")
    ax.set_ylabel("final accuracy (4 lookups)")
    ax.set_ylim(0, 1.05)
    ax.set_title("plain against talking heads", fontsize=9)
    legend_outside(ax, fontsize=7)
    style_axes(ax)
    return fig


def redundancy_figure(result: RedundancyResult) -> Figure:
    """Left: each layer's normalised spectrum of [B_1 | ... | B_H] (effective rank in the
    legend). Right: quality against the shared key/query rank, Cordonnier et al.'s 4x marked."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    count = len(result.layers)
    shown = {0, count // 2, count - 1} if count > 8 else set(range(count))
    for k, layer in enumerate(result.layers):
        values = np.cumsum(layer.singular_values)
        label = f"layer {layer.layer}: eff. rank {layer.effective_rank:.0f}"
        ax1.plot(
            np.arange(1, len(values) + 1),
            values,
            color=colormaps["viridis"](k / max(count - 1, 1)),
            label=label if k in shown else None,
        )
    ax1.set_xlabel(f"shared query directions k (of {result.embed_dim})")
    ax1.set_ylabel("share of singular-value mass")
    # the model's name over the figure: over the axes, a long name ran past the figure's left
    fig.suptitle(f"{result.model}: how much the heads' key/query spaces overlap", fontsize=10)
    ax1.set_title("spectrum of the heads' W_Q_i^T W_K_i", fontsize=9)
    legend_outside(ax1, fontsize=7, title="colour: layer,\nfirst to last", title_fontsize=7)
    style_axes(ax1)
    rows = sorted((r for r in result.curve if not r.original), key=lambda r: r.rank)
    key = "perplexity" if "perplexity" in rows[0].measures else "mean_cosine"
    ranks = [r.rank for r in rows]
    values = [r.measures[key] for r in rows]
    ax2.plot(range(len(rows)), values, "o-", color=COLOURS[0], label=key.replace("_", " "))
    for i, value in enumerate(values):
        ax2.annotate(
            f"{value:.3g}",
            (i, value),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
            color=INK,
        )
    width = result.qk_width
    if width // 4 in ranks:
        ax2.axvline(
            ranks.index(width // 4),
            color=COLOURS[1],
            linestyle=":",
            label="Cordonnier et al.: 4x cut at no loss (retrained)",
        )
    ax2.set_xticks(range(len(rows)), [f"{k}\n({width / k:.0f}x)" for k in ranks])
    ax2.set_xlabel("shared key/query rank k (cut factor), every layer, no retraining")
    ax2.set_ylabel(key.replace("_", " ") + (" (original = 1)" if key == "mean_cosine" else ""))
    ax2.set_title("the model with its key/query width cut", fontsize=9)
    legend_outside(ax2, fontsize=7)
    style_axes(ax2)
    return fig

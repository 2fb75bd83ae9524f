"""Figures of the "why heads" measurements (expressivity, specialisation, redundancy).

Each takes the results document (the plain dict written by the command) and returns a Figure;
the report embeds them and the commands' ``--figure`` writes them. Axes are linear with ticks at
the measured values (text is drawn verbatim, so no log-scale mathtext labels).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from headlab.report.figures import COLOURS, INK, _style


def expressivity_figure(doc: dict) -> Figure:
    """KL floor against head size per (targets, n); error of 1 head vs h heads on h offsets."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    dims = sorted({r["head_dim"] for r in doc["rank"]})
    where = {d: i for i, d in enumerate(dims)}
    keys = sorted({(r["source"], r["seq_len"]) for r in doc["rank"]})
    lengths = sorted({n for _, n in keys})
    for source, n in keys:
        k = lengths.index(n)
        rows = sorted(
            (r for r in doc["rank"] if (r["source"], r["seq_len"]) == (source, n)),
            key=lambda r: r["head_dim"],
        )
        style = "o-" if source == "random" else "s--"
        ax1.plot(
            [where[r["head_dim"]] for r in rows],
            [r["kl"] for r in rows],
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
    ax1.legend(fontsize=7, frameon=False)
    _style(ax1)
    pats = doc["patterns"]
    labels = [f"{p['num_heads']} x {p['head_dim']}" for p in pats]
    ax2.bar(labels, [p["relative_error"] for p in pats], color=COLOURS[: len(pats)])
    for i, p in enumerate(pats):
        ax2.text(
            i,
            p["relative_error"],
            f"{p['relative_error']:.3f}",
            ha="center",
            va="bottom",
            fontsize=8,
            color=INK,
        )
    blocks = pats[0]["blocks"] if pats else 0
    ax2.set_xlabel("heads x head size (equal parameters)")
    ax2.set_ylabel("relative error (MSE / target power)")
    ax2.set_title(f"copy {blocks} offsets at once: one pattern per head", fontsize=9)
    _style(ax2)
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

"""The induction circuit forming over training (``InductionFormation``): accuracy, the
K-composition of the (previous-token head, induction head) pair beside its random baseline, and
the exact path-patching effect of that edge (and, dashed, of every layer-0 -> layer-1 K edge at
once), over steps, one line per head count."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from headlab.report.figures import legend_outside, style_axes
from headlab.report.png_files import save_figure
from headlab.results.induction_circuit_result import InductionFormation
from headlab.results.output_policy import Kind

INDUCTION_CIRCUIT_FIGURE_KIND = Kind.png("induction-circuit")
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
MARKERS = ("o", "s", "^", "D", "v")


def formation_figure(result: InductionFormation) -> Figure:
    """Three panels sharing the step axis: accuracy, K-composition, patching effect. One colour
    per head count; with several seeds, each seed its own marker (the seeds' lines labelled in
    the accuracy panel, the measures once per head count)."""
    fig = Figure(figsize=(9.0, 7.0), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    counts = list(dict.fromkeys(run.heads for run in result.runs))
    several = len({run.seed for run in result.runs}) > 1
    seen: dict[int, int] = {}
    for run in result.runs:
        color = COLORS[counts.index(run.heads) % len(COLORS)]
        nth = seen[run.heads] = seen.get(run.heads, -1) + 1
        marker = MARKERS[nth % len(MARKERS)]
        first = nth == 0
        steps = [c.step for c in run.checkpoints]
        label = f"h = {run.heads}"
        axes[0].plot(
            steps,
            [c.accuracy for c in run.checkpoints],
            marker=marker,
            ms=3,
            color=color,
            alpha=1.0 if first else 0.75,
            label=f"{label}, seed {run.seed}" if several else label,
        )
        axes[1].plot(
            steps,
            [c.k_composition for c in run.checkpoints],
            marker=marker,
            ms=3,
            color=color,
            alpha=1.0 if first else 0.75,
            label=f"{label}: best prev-token -> best induction head" if first else None,
        )
        if first:
            axes[1].plot(
                steps,
                [c.k_baseline for c in run.checkpoints],
                "--",
                color=color,
                label=f"{label}: random baseline",
            )
        axes[2].plot(
            steps,
            [c.patching_effect for c in run.checkpoints],
            marker=marker,
            ms=3,
            color=color,
            alpha=1.0 if first else 0.75,
            label=f"{label}: the pair's edge" if first else None,
        )
        paths = [(c.step, c.k_path_effect) for c in run.checkpoints if c.k_path_effect is not None]
        if paths:
            axes[2].plot(
                *zip(*paths, strict=True),
                "--",
                color=color,
                alpha=1.0 if first else 0.75,
                label=f"{label}: every layer 0 -> layer 1 K edge" if first else None,
            )
    axes[0].set_ylabel("accuracy (held out)")
    axes[0].set_ylim(-0.02, 1.02)
    axes[1].set_ylabel("K-composition")
    axes[2].set_ylabel("path patching:\nchange in log p(answer)")
    axes[2].axhline(0.0, color="0.6", lw=0.8)
    axes[2].set_xlabel("training step")
    for ax in axes:
        style_axes(ax)
    legend_outside(axes[0])
    legend_outside(axes[1])
    legend_outside(axes[2])
    seeds = sorted({run.seed for run in result.runs})
    which = f"seeds {', '.join(map(str, seeds))}" if several else f"seed {seeds[0]}"
    axes[0].set_title(
        f"Induction circuit forming: the sweep's 2-layer models ({which})", loc="left"
    )
    return fig


def write_formation_figure(
    result: InductionFormation, path: str | Path, *, force: bool = False
) -> Path:
    """``formation_figure`` saved atomically to ``path`` under the output policy."""
    return save_figure(
        formation_figure(result),
        path,
        INDUCTION_CIRCUIT_FIGURE_KIND,
        force=force,
        argument="figure",
        dpi=110,
        bbox_inches="tight",
        facecolor="white",
    )

"""A layers x heads grid figure of head statistics (matplotlib, written to a PNG)."""

from __future__ import annotations

from pathlib import Path

from headlab.files import save_figure
from headlab.heads.statistics import HeadStatistics
from headlab.output_policy import Kind


def write_grid_figure(stats: HeadStatistics, path: str | Path, *, force: bool = False) -> Path:
    """One heat map per metric (rows = layers, columns = heads), saved atomically to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    path = Path(path)
    names = list(stats.metrics)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.0))
    for ax, name in zip(axes, names, strict=True):
        rows = stats.metrics[name]
        grid = np.full((len(rows), max(map(len, rows))), np.nan)
        for i, row in enumerate(rows):
            grid[i, : len(row)] = row
        image = ax.imshow(grid, cmap="viridis", aspect="auto")
        ax.set_title(name)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(f"{stats.model}: attention statistics per head ({stats.n_texts} texts)")
    fig.tight_layout()
    return save_figure(fig, path, Kind.png("model-heads"), force=force, dpi=100)

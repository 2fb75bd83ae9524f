"""A layers x heads grid figure of head statistics (matplotlib, written to a PNG)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from headlab.heads.statistics import METRICS, HeadStatistics


def write_grid_figure(stats: HeadStatistics, path: str | Path) -> Path:
    """One heat map per metric (rows = layers, columns = heads), saved atomically to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    path = Path(path)
    fig, axes = plt.subplots(1, len(METRICS), figsize=(3.2 * len(METRICS), 3.0))
    for ax, name in zip(axes, METRICS, strict=True):
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return path

"""The layers x heads overview of a model's head statistics (model_heads.json), as page data.

One small grid per statistic: layers as rows, heads as columns, colour = the value on that
statistic's own scale (viridis, its minimum to its maximum), with the colour bar's ends. The page
draws the grids as links: a click opens that head's view.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_hex

STOPS = 9  # colour-bar stops (a CSS gradient)


def _colour(share: float) -> str:
    return to_hex(colormaps["viridis"](float(np.clip(share, 0.0, 1.0))))


def overview(heads: dict) -> dict:
    """``HeadStatistics.to_dict()`` -> {model, layers, heads, metrics: [{name, low, high,
    gradient, rows: [[{value, colour, dark}] per head] per layer]}]}. Rows of unequal length
    (pruned layers) keep their own length."""
    metrics = []
    for name, grid in heads["metrics"].items():
        values = [v for row in grid for v in row]
        low, high = (min(values), max(values)) if values else (0.0, 0.0)
        span = high - low
        rows = [
            [
                {
                    "value": v,
                    "colour": _colour(0.5 if span == 0 else (v - low) / span),
                    "dark": span == 0 or (v - low) / span < 0.55,
                }
                for v in row
            ]
            for row in grid
        ]
        stops = ", ".join(_colour(i / (STOPS - 1)) for i in range(STOPS))
        metrics.append({"name": name, "low": low, "high": high, "gradient": stops, "rows": rows})
    return {
        "model": heads["model"],
        "layers": len(next(iter(heads["metrics"].values()), [])),
        "heads": max((len(r) for g in heads["metrics"].values() for r in g), default=0),
        "metrics": metrics,
    }

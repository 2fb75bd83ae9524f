"""The layers x heads overview of a model's heads (model_heads.json), as page data.

One small grid per quantity: layers as rows, heads as columns. First the head detectors of a
decoder (induction, previous-token, duplicate-token: scores in [0, 1], drawn on that one scale so
that grids compare), then each statistic on its own scale (viridis, its minimum to its maximum),
with the colour bar's ends; and, where a long-context run measured them, each head's role (one
colour per role, with its legend). The page draws the grids as links: a click opens that head's
view.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_hex

STOPS = 9  # colour-bar stops (a CSS gradient)
# the detectors in the order a reader looks for them: the induction circuit's two heads first
DETECTOR_ORDER = ("induction", "previous_token", "duplicate_token")


def _colour(share: float) -> str:
    return to_hex(colormaps["viridis"](float(np.clip(share, 0.0, 1.0))))


def _scaled(name: str, grid: list[list[float]], kind: str, fixed: bool) -> dict:
    """One grid of numbers: on [0, 1] when ``fixed`` (scores), else on its own range."""
    values = [v for row in grid for v in row]
    low, high = (min(values), max(values)) if values else (0.0, 0.0)
    if fixed:
        low, high = 0.0, 1.0
    span = high - low
    rows = [
        [
            {
                "value": v,
                "text": f"{v:.4g}",
                "colour": _colour(0.5 if span == 0 else (v - low) / span),
            }
            for v in row
        ]
        for row in grid
    ]
    stops = ", ".join(_colour(i / (STOPS - 1)) for i in range(STOPS))
    title = name.replace("_", "-") if kind == "detector" else name
    return {"name": title, "kind": kind, "low": low, "high": high, "gradient": stops, "rows": rows}


def _roles(roles: list[list[str]], colours: dict[str, str]) -> dict:
    """The role of each head, one colour per role; the legend counts the heads of each."""
    flat = [r for row in roles for r in row]
    rows = [[{"value": r, "text": r, "colour": colours[r]} for r in row] for row in roles]
    legend = [{"role": r, "colour": c, "count": flat.count(r)} for r, c in colours.items()]
    return {"name": "role", "kind": "role", "rows": rows, "legend": legend}


def overview(
    heads: dict,
    roles: list[list[str]] | None = None,
    role_colours: dict[str, str] | None = None,
) -> dict:
    """``HeadStatistics.to_dict()`` (and optionally each head's role, (layer, head), with the
    colour of each role) -> {model, layers, heads, metrics: [{name, kind (detector, statistic or
    role), rows: [[{value, text, colour}] per head] per layer, and low, high, gradient (numbers)
    or legend (roles)}]}. Rows of unequal length (pruned layers) keep their own length."""
    detectors = heads.get("detectors", {})
    ordered = [n for n in DETECTOR_ORDER if n in detectors] + [
        n for n in detectors if n not in DETECTOR_ORDER
    ]
    metrics = [_scaled(n, detectors[n], "detector", fixed=True) for n in ordered]
    metrics += [_scaled(n, g, "statistic", fixed=False) for n, g in heads["metrics"].items()]
    if roles is not None and role_colours is not None:
        metrics.append(_roles(roles, role_colours))
    return {
        "model": heads["model"],
        "layers": len(next(iter(heads["metrics"].values()), [])),
        "heads": max((len(r) for g in heads["metrics"].values() for r in g), default=0),
        "metrics": metrics,
    }

"""How much of the model's behaviour a circuit keeps: faithfulness, its curve over circuit size
against random circuits of the same size, and MIB's areas (Mueller et al. 2025).

    faithfulness(C) = (m(C) - m(corrupted)) / (m(clean) - m(corrupted))

m(C) is the metric with only C's edges clean and every other edge patched (circuit_patching.py):
1 when the circuit does all the model does, 0 when it does nothing. Over the fractions of edges
``fractions`` (MIB's 0.1% .. 100% by default), the curve gives the top-n (or greedy) circuit's
faithfulness and that of ``seeds`` random circuits of each size; the areas under it, by the
trapezoid rule over the fraction of edges, are MIB's circuit performance ratio (CPR, the area
under f: higher is better) and circuit-model distance (CMD, the area under |1 - f|: lower is
better).

These are MIB's definitions (hannamw/MIB-circuit-track, ``evaluate_area_under_curve``): its
fractions, faithfulness normalised by the clean and corrupted metric, and the trapezoid rule
over the fraction of edges itself (its default ``log_scale=False``). Two differences, chosen:
a size is ``round(fraction * edges)`` (at least 1) where MIB takes ``int()``, and a circuit is
the chosen edges as they are, where MIB prunes edges that no longer reach both the input and
the logits (``prune=True``). The circuit of every edge is the clean run: its faithfulness is 1
without a run. ``faithfulness_curves`` measures several selections (top-n and greedy) against
the same random circuits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from headlab.circuits.circuit_patching import CircuitPatcher
from headlab.circuits.discovery import greedy_edges, top_edges
from headlab.results.circuit_edges import EdgeScores, FaithfulnessCurve

MIB_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def faithfulness(
    circuits: CircuitPatcher, kept: Sequence[Sequence[str]], chunk: int = 8
) -> list[float]:
    """The faithfulness of each circuit in ``kept`` (its edges clean, all others patched).
    ValueError when the corruption does not move the metric (nothing to keep)."""
    p = circuits.patcher
    gap = p.clean_value - p.corrupted_value
    if abs(gap) <= 1e-9 * max(abs(p.clean_value), 1.0):
        raise ValueError(
            f"the corrupted input leaves the metric where it was ({p.clean_value:.6g}): "
            "faithfulness is undefined"
        )
    every = {e.name for e in circuits.graph.edges}
    patched = [every - set(c) for c in kept]
    to_run = [i for i, edges in enumerate(patched) if edges]  # nothing patched: the clean run
    values = [1.0] * len(kept)
    for start in range(0, len(to_run), chunk):
        rows = to_run[start : start + chunk]
        for i, m in zip(rows, circuits.metric([patched[i] for i in rows]), strict=True):
            values[i] = (float(m) - p.corrupted_value) / gap
    return values


def _area(x: Sequence[float], y: Sequence[float]) -> float:
    return float(sum((x[i + 1] - x[i]) * (y[i] + y[i + 1]) / 2 for i in range(len(x) - 1)))


def faithfulness_curve(
    circuits: CircuitPatcher,
    scores: EdgeScores,
    fractions: Sequence[float] = MIB_FRACTIONS,
    seeds: int = 3,
    greedy: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> FaithfulnessCurve:
    """The curve of the module docstring for the circuits ``scores`` picks (top-n, or greedy).
    ValueError for fractions outside (0, 1] or not increasing, seeds < 1."""
    selection = "greedy" if greedy else "top"
    return faithfulness_curves(circuits, scores, (selection,), fractions, seeds, progress)[0]


def faithfulness_curves(
    circuits: CircuitPatcher,
    scores: EdgeScores,
    selections: Sequence[str] = ("top", "greedy"),
    fractions: Sequence[float] = MIB_FRACTIONS,
    seeds: int = 3,
    progress: Callable[[int, int], None] | None = None,
) -> list[FaithfulnessCurve]:
    """One curve per selection ("top" or "greedy"), all against the same random circuits
    (measured once, in the same runs). ValueError for fractions outside (0, 1] or not
    increasing, seeds < 1, an unknown or repeated selection."""
    if (
        not fractions
        or any(not 0 < f <= 1 for f in fractions)
        or list(fractions) != sorted(set(fractions))
    ):
        raise ValueError(f"fractions must increase within (0, 1], got {list(fractions)}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be an integer >= 1, got {seeds!r}")
    if (
        not selections
        or len(set(selections)) != len(selections)
        or any(s not in ("top", "greedy") for s in selections)
    ):
        raise ValueError(f"selections must be distinct of top, greedy, got {list(selections)}")
    edges = [e.name for e in circuits.graph.edges]
    total = len(edges)
    sizes = [max(1, round(f * total)) for f in fractions]
    found: list[list[float]] = [[] for _ in selections]
    randoms = []
    for i, n in enumerate(sizes):
        picks = [
            greedy_edges(scores, circuits.graph, n) if s == "greedy" else top_edges(scores, n)
            for s in selections
        ]
        draws = []
        for seed in range(seeds):
            order = torch.randperm(total, generator=torch.Generator().manual_seed(seed * 7919 + n))
            draws.append([edges[j] for j in order[:n].tolist()])
        values = faithfulness(circuits, [*picks, *draws])
        for k in range(len(selections)):
            found[k].append(values[k])
        randoms.append(values[len(selections) :])
        if progress is not None:
            progress(i + 1, len(sizes))
    x = list(fractions)
    random_cpr = [_area(x, [r[s] for r in randoms]) for s in range(seeds)]
    random_cmd = [_area(x, [abs(1 - r[s]) for r in randoms]) for s in range(seeds)]
    return [
        FaithfulnessCurve(
            method=scores.method,
            selection=selection,
            metric=scores.metric,
            edges=total,
            fractions=x,
            sizes=sizes,
            faithfulness=values,
            random=randoms,
            cpr=_area(x, values),
            cmd=_area(x, [abs(1 - f) for f in values]),
            random_cpr=random_cpr,
            random_cmd=random_cmd,
        )
        for selection, values in zip(selections, found, strict=True)
    ]


__all__ = ["MIB_FRACTIONS", "faithfulness", "faithfulness_curve", "faithfulness_curves"]

"""Displays of a circuit run: the whole graph with a threshold on |score| (every edge travels,
as typed arrays, strongest first; the page draws them on a canvas), and faithfulness curves."""

from __future__ import annotations

import base64

import numpy as np

from headlab.report.circuit_figures import _layout, _split
from headlab.report.displays.display_bundle import Display
from headlab.results.circuit_edges import FaithfulnessCurve
from headlab.results.circuit_run import CircuitRun
from headlab.results.head_pattern_result import encode_floats

INPUTS = ("", "q", "k", "v")  # an edge's input, by its code in the page's arrays


def circuit_display(
    run: CircuitRun, *, threshold: float | None = None, node: str | None = None
) -> Display:
    """Every scored edge of ``run`` on the model's graph (layers left to right, K/V groups of
    GQA layers as boxes); edges with |score| >= ``threshold`` are drawn (default: the circuit,
    the top ``run.top``); ``node`` (a graph name such as "18.6") lit with its edges. ValueError
    for a negative threshold or a node the graph does not have."""
    if threshold is not None and threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    layout = _layout(run)
    where = layout.where
    names = list(where)
    if node is not None and node not in where:
        raise ValueError(f"node must be a node of the graph (such as {names[1]!r}), got {node!r}")
    index = {name: i for i, name in enumerate(names)}
    order = sorted(range(len(run.scores.edges)), key=lambda i: (-abs(run.scores.scores[i]), i))
    ends = np.zeros((2, len(order)), dtype="<u2")
    inputs = np.zeros(len(order), dtype=np.uint8)
    scores = np.zeros(len(order), dtype=np.float32)
    kept = 0
    for i in order:
        sender, receiver, input_ = _split(run.scores.edges[i])
        if sender not in index or receiver not in index:
            continue
        ends[:, kept] = index[sender], index[receiver]
        inputs[kept] = INPUTS.index(input_) if input_ in INPUTS else 0
        scores[kept] = run.scores.scores[i]
        kept += 1
    top = run.top_edges()
    # as the page holds the scores (float32), so that the circuit is exactly the edges at or above
    default = float(np.float32(abs(top[-1][1]))) if top else 0.0
    data = {
        "model": run.model,
        "task": run.task,
        "method": run.method,
        "top": run.top,
        "heads_per_layer": run.heads_per_layer,
        "kv_heads_per_layer": run.kv_heads_per_layer,
        "xlim": list(layout.xlim),  # the figure's frame: an encoder-decoder's is wider
        "ylim": list(layout.ylim),
        "xticks": [list(t) for t in zip(*sorted(zip(*layout.xticks, strict=True)), strict=True)],
        "bands": [list(band) for band in layout.bands],  # (x from, x to, stream name)
        "nodes": names,
        "x": [where[n][0] for n in names],
        "y": [where[n][1] for n in names],
        "picked": node,
        "count": kept,
        "threshold": default if threshold is None else float(threshold),
        "senders": _b64(ends[0, :kept]),
        "receivers": _b64(ends[1, :kept]),
        "inputs": _b64(inputs[:kept]),
        "scores": encode_floats(scores[:kept]),
    }
    return Display("circuit", data, repr(run), "display-circuit")


def _b64(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values).tobytes()).decode("ascii")


def faithfulness_display(curves: list[FaithfulnessCurve], title: str) -> Display:
    """The curves over the fraction of edges kept, against the random circuits of the first."""
    if not curves:
        raise ValueError("no faithfulness curve to draw")
    data = {"title": title, "curves": [c.to_dict() for c in curves]}
    summary = "; ".join(map(repr, curves))
    return Display("faithfulness", data, summary, "display-faithfulness")


def curve_display(curve: FaithfulnessCurve, *, title: str = "") -> Display:
    """One faithfulness curve (``faithfulness_display`` of it alone)."""
    return faithfulness_display([curve], title or f"{curve.selection} {curve.method} circuits")

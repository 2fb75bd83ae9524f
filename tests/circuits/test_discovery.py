"""Circuits from scores (top-n, greedy from the logits) and their faithfulness: the whole graph
keeps everything (1), the empty circuit nothing (0), MIB's areas are the trapezoid rule over the
curve, and bad sizes are refused in one line."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_attribution import _task
from test_path_patching import sharp

from headlab.circuits.circuit_patching import CircuitPatcher
from headlab.circuits.discovery import greedy_edges, top_edges
from headlab.circuits.faithfulness import faithfulness, faithfulness_curve, faithfulness_curves
from headlab.circuits.graph import Graph, LayerShape
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach
from headlab.results.circuit_edges import EdgeScores, FaithfulnessCurve
from headlab.results.json_store import read_result, write_result

GRAPH = Graph.of([LayerShape(2, 1), LayerShape(3, 3, parallel=True)])


def _scores(values):
    edges = [e.name for e in GRAPH.edges]
    return EdgeScores("eap", "logprob", edges, [float(v) for v in values], 0.0, -1.0)


@given(
    st.lists(st.floats(-5, 5), min_size=len(GRAPH.edges), max_size=len(GRAPH.edges)),
    st.integers(0, len(GRAPH.edges)),
)
def test_top_and_greedy(values, n):
    scores = _scores(values)
    top = top_edges(scores, n)
    by_size = sorted(range(len(values)), key=lambda i: (-abs(values[i]), i))
    assert top == [scores.edges[i] for i in by_size[:n]]
    grown = greedy_edges(scores, GRAPH, n)
    assert len(grown) == n  # every edge reaches the logits in a graph with all edges scored
    inside = {"logits"}
    for name in grown:
        edge = GRAPH.edge(name)
        assert edge.receiver in inside  # connected: it feeds what is already in the circuit
        sender = GRAPH.node(edge.sender)
        inside.add(edge.sender)
        if sender.kind == "head":
            inside.add(GRAPH.kv_receiver(sender.layer, sender.index))


def test_sizes_refused():
    scores = _scores([1.0] * len(GRAPH.edges))
    with pytest.raises(ValueError, match=rf"n must be an integer in 0..{len(GRAPH.edges)}"):
        top_edges(scores, len(GRAPH.edges) + 1)
    with pytest.raises(ValueError, match="n must be an integer"):
        greedy_edges(scores, GRAPH, -1)


def test_faithfulness_ends_and_areas(tmp_path):
    clean, corrupted, metric = _task()
    patcher = Patcher(attach(sharp("llama")), clean, corrupted, metric)
    circuits = CircuitPatcher(patcher)
    every = [e.name for e in patcher.graph.edges]
    assert faithfulness(circuits, [every, []]) == pytest.approx([1.0, 0.0], abs=1e-5)
    # every edge kept is taken as the clean run without a run: it is one
    assert float(circuits.metric([set()])[0]) == pytest.approx(patcher.clean_value, abs=1e-5)
    effects = patcher.effects(every)
    scores = EdgeScores(
        "path-patching",
        "logit_diff",
        every,
        effects.tolist(),
        patcher.clean_value,
        patcher.corrupted_value,
    )
    fractions = (0.05, 0.2, 0.5, 1.0)
    curve = faithfulness_curve(circuits, scores, fractions, seeds=3)
    assert curve.sizes == [round(f * len(every)) for f in fractions]
    assert curve.faithfulness[-1] == pytest.approx(1.0, abs=1e-5)
    assert all(r == pytest.approx(1.0, abs=1e-5) for r in curve.random[-1])
    trapezoid = sum(
        (fractions[i + 1] - fractions[i]) * (curve.faithfulness[i] + curve.faithfulness[i + 1]) / 2
        for i in range(3)
    )
    assert curve.cpr == pytest.approx(trapezoid)
    grown = faithfulness_curve(circuits, scores, (0.2, 1.0), seeds=1, greedy=True)
    assert grown.selection == "greedy" and grown.faithfulness[-1] == pytest.approx(1.0, abs=1e-5)
    for result, name in ((curve, "faithfulness.json"), (scores, "edges.json")):
        write_result(tmp_path / name, result)
        assert read_result(tmp_path / name, type(result)) == result
    broken = {**curve.to_dict(), "sizes": [1, 2]}
    with pytest.raises(ValueError, match=r"circuit-faithfulness\.sizes: expected 4 entries"):
        FaithfulnessCurve.from_dict(broken)
    with pytest.raises(ValueError, match="fractions must increase within"):
        faithfulness_curve(circuits, scores, (0.5, 0.2))
    with pytest.raises(ValueError, match="seeds must be an integer >= 1, got 0"):
        faithfulness_curve(circuits, scores, seeds=0)


def test_curves_share_their_random_circuits():
    clean, corrupted, metric = _task()
    patcher = Patcher(attach(sharp("llama")), clean, corrupted, metric)
    circuits = CircuitPatcher(patcher)
    every = [e.name for e in patcher.graph.edges]
    scores = EdgeScores(
        "path-patching",
        "logit_diff",
        every,
        patcher.effects(every).tolist(),
        patcher.clean_value,
        patcher.corrupted_value,
    )
    fractions = (0.1, 0.3, 1.0)
    top, grown = faithfulness_curves(circuits, scores, ("top", "greedy"), fractions, seeds=2)
    alone = [
        faithfulness_curve(circuits, scores, fractions, seeds=2, greedy=g) for g in (False, True)
    ]
    for both, one in zip((top, grown), alone, strict=True):
        assert both.selection == one.selection
        assert both.faithfulness == pytest.approx(one.faithfulness, abs=1e-6)
        for row, want in zip(both.random, one.random, strict=True):
            assert row == pytest.approx(want, abs=1e-6)
        assert both.cpr == pytest.approx(one.cpr, abs=1e-6)
    assert top.random == grown.random  # measured once, in the same runs
    with pytest.raises(ValueError, match=r"selections must be distinct of top, greedy"):
        faithfulness_curves(circuits, scores, ("top", "top"))

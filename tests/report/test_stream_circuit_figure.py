"""The circuit figure of an encoder-decoder (``circuit_graph_figure`` of a ``CircuitRun`` with
``cross_heads_per_layer``): every node of the graph (circuits/stream_graph.py, the outside
reference for the node names) has a place, the encoder's nodes left of the decoder's
embeddings and the decoder's right of them, each decoder block's cross-attention heads over its
self-attention heads; each edge of the circuit is one arc from its sender's place to its
receiver's; the file round-trips the new field and refuses counts its edges contradict; text is
drawn verbatim. Sizes are distinct: 2 encoder blocks of 3 heads, 3 decoder blocks of 2 self and
5 cross heads."""

from __future__ import annotations

import json

import pytest
from matplotlib.patches import FancyArrowPatch

from headlab.circuits.stream_graph import StreamBlockShape, StreamGraph
from headlab.report.circuit_figures import _layout, circuit_graph_figure
from headlab.report.figures import png_bytes
from headlab.results.circuit_edges import EdgeScores
from headlab.results.circuit_run import CircuitRun
from headlab.results.circuit_tasks import TaskPerformance

BLOCKS = (
    StreamBlockShape("encoder", 3),
    StreamBlockShape("encoder", 3),
    StreamBlockShape("decoder", 2, 5),
    StreamBlockShape("decoder", 2, 5),
    StreamBlockShape("decoder", 2, 5),
)
MODEL = "t5_tiny $x$ <b>"  # mathtext and markup would change it if not drawn verbatim


def _run(top: int = 11) -> CircuitRun:
    graph = StreamGraph(BLOCKS)
    names = [e.name for e in graph.edges]
    scores = [((7 * i) % 23 - 11) / 7 for i in range(len(names))]  # both signs, no ties at top
    crossing = next(i for i, n in enumerate(names) if n.startswith("0.1->") and ".x3<k>" in n)
    scores[crossing] = 5.0  # an encoder head into a cross-attention head's keys: the strongest
    performance = TaskPerformance("source-target", "logprob", 2, -1.5, -4.0, 0.5, True)
    return CircuitRun(
        MODEL,
        "source-target",
        "eap",
        None,
        top,
        performance,
        [b.num_heads for b in BLOCKS],
        [b.num_heads for b in BLOCKS],
        EdgeScores("eap", "logprob", names, scores, -1.5, -4.0),
        cross_heads_per_layer=[b.cross_heads for b in BLOCKS],
    )


def test_every_node_has_its_place_in_its_stream():
    run = _run()
    where = _layout(run).where
    graph = StreamGraph(BLOCKS)
    assert {node.name for node in graph.nodes} <= set(where)
    decoder_embed = where["embed.decoder"][0]
    for node in graph.nodes:
        x, y = where[node.name]
        if node.kind == "logits":
            continue
        assert (x < decoder_embed) == (node.stream == "encoder"), node
        if node.kind == "cross":
            tallest_self = max(where[f"{node.layer}.{h}"][1] for h in range(2))
            assert y > tallest_self and x == where[f"{node.layer}.0"][0]


def test_each_edge_of_the_circuit_is_one_arc_between_its_ends():
    run = _run()
    figure = circuit_graph_figure(run)
    (ax,) = figure.axes
    where = _layout(run).where
    arcs = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    top = run.top_edges()
    assert len(arcs) == len(top)
    drawn = sorted(tuple(map(tuple, arc._posA_posB)) for arc in arcs)
    want = []
    for edge, _ in top:
        sender, rest = edge.split("->")
        receiver = rest.partition("<")[0]
        want.append((where[sender], where[receiver]))
    assert drawn == sorted(want)
    strongest = top[0][0]
    assert strongest.startswith("0.1->") and ".x3<k>" in strongest
    texts = [t.get_text() for t in ax.texts]
    assert {"encoder", "decoder", "embed.encoder", "embed.decoder", "logits"} <= set(texts)
    assert ax.get_title(loc="left").startswith(MODEL + ":")
    assert png_bytes(figure).startswith(b"\x89PNG")  # "$x$" drawn as text, not as math


def test_the_field_round_trips_and_is_checked_against_the_edges():
    run = _run()
    document = json.loads(json.dumps(run.to_dict()))
    back = CircuitRun.from_dict(document)
    assert back.cross_heads_per_layer == [0, 0, 5, 5, 5]
    assert back.to_dict() == run.to_dict()
    document["cross_heads_per_layer"] = [0, 0, 5, 3, 5]
    with pytest.raises(ValueError, match=r"cross_heads_per_layer\[3\]"):
        CircuitRun.from_dict(document)
    document.pop("cross_heads_per_layer")  # a file written before the field: one stream
    assert CircuitRun.from_dict(document).cross_heads_per_layer is None


def test_the_display_frames_every_node_of_both_streams():
    """The notebook's and the report's circuit display draw in the figure's frame: every node
    of the two-stream graph inside it (the page maps xlim x ylim onto its canvas), the bands
    named, and the ticks in run order."""
    from headlab.report.displays.circuit_display import circuit_display

    data = circuit_display(_run()).data
    (x0, x1), (y0, y1) = data["xlim"], data["ylim"]
    assert len(data["nodes"]) == len(StreamGraph(BLOCKS).nodes)
    for name, x, y in zip(data["nodes"], data["x"], data["y"], strict=True):
        assert x0 < x < x1 and y0 < y < y1, name
    assert [band[2] for band in data["bands"]] == ["encoder", "decoder"]
    positions, labels = data["xticks"]
    assert labels[0] == "emb" and labels[-1] == "out" and positions == sorted(positions)

"""The graph of a model: node and edge counts from a formula written here, every edge from an
earlier writer, names that parse back, and each family's layers found by observation
(GPT-NeoX parallel, the others sequential; GQA groups where K/V heads are fewer)."""

import pytest
from hf_families import build
from hypothesis import given
from hypothesis import strategies as st

from headlab.circuits.blocks import circuit_blocks, graph_of
from headlab.circuits.graph import Edge, Graph, LayerShape
from headlab.models.hf import attach


def _shapes():
    layer = st.tuples(st.integers(1, 4), st.integers(1, 3), st.booleans(), st.booleans()).map(
        lambda t: LayerShape(t[0] * t[1], t[1], t[2], t[3])
    )
    return st.lists(layer, min_size=1, max_size=4)


def _expected_edges(layers) -> int:
    """Each layer's receivers read every sender written before them (see graph.py)."""
    senders, total = 1, 0  # the embeddings
    for shape in layers:
        total += (shape.num_heads + 2 * shape.num_kv_heads) * senders
        if shape.has_mlp:
            total += senders + (0 if shape.parallel else shape.num_heads)
        senders += shape.num_heads + shape.has_mlp
    return total + senders  # into the logits


@given(_shapes())
def test_counts_and_order(layers):
    graph = Graph.of(layers)
    assert len(graph.edges) == _expected_edges(layers)
    assert len(set(graph.edge_index)) == len(graph.edges)
    groups = sum(s.num_kv_heads for s in layers if s.grouped)
    assert len(graph.nodes) == 2 + sum(s.num_heads + s.has_mlp for s in layers) + groups
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    for edge in graph.edges:
        sender, receiver = graph.node(edge.sender), graph.node(edge.receiver)
        assert sender.kind in ("embed", "head", "mlp")
        assert order[edge.sender] < order[edge.receiver]
        if receiver.kind in ("head", "group"):
            assert sender.layer < receiver.layer
        assert Edge.parse(edge.name) == edge


def test_gqa_receivers():
    graph = Graph.of([LayerShape(6, 2), LayerShape(6, 2)])
    assert graph.kv_receiver(1, 4) == "1.g1"
    assert graph.node("1.g1").heads == (3, 4, 5)
    inputs = {(e.receiver, e.input) for e in graph.edges if e.sender == "0.5"}
    assert ("1.g0", "k") in inputs and ("1.0", "q") in inputs
    assert ("1.0", "k") not in inputs  # K and V belong to the group in a GQA layer
    assert ("mlp.0", "in") in inputs  # sequential: the layer's MLP reads its heads
    assert graph.edge("0.5->1.g0<k>").receiver == "1.g0"


def test_bad_names():
    graph = Graph.of([LayerShape(3, 3)])
    with pytest.raises(ValueError, match=r"no node '5\.0'"):
        graph.edge("5.0->logits")
    with pytest.raises(ValueError, match="does not write"):
        graph.edge("0.1->0.2<q>")
    with pytest.raises(ValueError, match="input is one of q, k, v"):
        Edge.parse("0.1->1.2<x>")
    with pytest.raises(ValueError, match="num_kv_heads dividing"):
        LayerShape(5, 2)


@pytest.mark.parametrize(
    ("family", "parallel", "grouped"),
    [
        ("llama", False, True),
        ("gpt2", False, False),
        ("gpt_neox", True, False),
        ("gemma2", False, True),
        ("qwen3", False, True),
    ],
)
def test_families(family, parallel, grouped):
    model = attach(build(family))
    found = circuit_blocks(model)
    assert [b.parallel for b in found] == [parallel] * len(found)
    assert all(b.has_mlp for b in found)
    graph = graph_of(model)
    assert graph.layers[0].grouped == grouped
    assert len(graph.edges) == _expected_edges(graph.layers)


def test_encoder_refused():
    with pytest.raises(ValueError, match="not a decoder"):
        circuit_blocks(attach(build("bert")))


def test_a_model_without_the_run_protocol_is_refused_in_one_line():
    from toy_family import Toy

    class Bare:
        name, causal = "bare", True

    with pytest.raises(ValueError, match="bare does not give its blocks") as error:
        graph_of(Bare())
    assert "\n" not in str(error.value)
    assert len(graph_of(Toy.build(mlp=True)).layers) == 2


def test_a_group_is_named_g_or_kv_and_a_heads_key_input_points_at_its_group():
    """One vocabulary with ``model ablate``: 1.kv1 is the node 1.g1 in every lookup; a head's
    key or value input in a GQA layer is refused naming the group whose input it is."""
    graph = Graph.of([LayerShape(6, 2), LayerShape(6, 2)])
    assert graph.node("1.kv1") == graph.node("1.g1")
    assert graph.edge("0.5->1.kv0<v>") == graph.edge("0.5->1.g0<v>") == Edge("0.5", "1.g0", "v")
    with pytest.raises(
        ValueError,
        match=r"k input of head 1\.4 belongs to its K/V group 1\.g1 "
        r"\(query heads 1\.3 to 1\.5\); use '0\.5->1\.g1<k>'",
    ):
        graph.edge("0.5->1.4<k>")
    assert graph.edge("0.5->1.4<q>").receiver == "1.4"  # the query input is the head's own
    with pytest.raises(ValueError, match="does not write"):  # a later sender, not a group issue
        graph.edge("1.0->1.g0<k>")

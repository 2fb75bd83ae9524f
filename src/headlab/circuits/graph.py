"""The graph of a model: which node writes into the residual stream where a later node reads it.

Nodes, in the order they write (Elhage et al. 2021's residual stream; EAP-IG's graph, with
headlab's names):

    embed        the embeddings (token, and learned positions where the family has them): the
                 residual stream entering layer 0
    L.H          query head H of layer L; it writes its output through its own slice of W_O
    L.gG         K/V group G of layer L in a GQA layer (num_kv_heads < num_heads): the receiver
                 of the key and value inputs of the query heads that read K/V head G; it writes
                 nothing (its heads do). ``L.kvG`` (as ``model ablate`` reads it) is the same
                 node: every lookup takes either
    mlp.L        the MLP of layer L (its whole output, after any post-norm of the family)
    logits       the final norm and the unembedding: a receiver only

Receivers and their inputs: a query head reads "q"; the key and value inputs ("k", "v") belong
to the K/V group in a GQA layer, and to the head itself (its own K/V head) otherwise; an MLP and
the logits read "in". An edge runs from every sender to every receiver that reads the residual
stream after the sender wrote into it: heads and MLPs of earlier layers and the embeddings; the
MLP of a layer also reads the heads of its own layer unless the layer is parallel (GPT-NeoX's
``use_parallel_residual``, GPT-J: attention and MLP read the same input).

Edge names: ``"16.0->18.g2<k>"``, ``"3.1->mlp.5"``, ``"mlp.2->logits"``.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

from headlab.results.node_names import canonical_group, group_name, head_name

EMBED = "embed"
LOGITS = "logits"
#: The inputs of an attention receiver; MLPs and the logits read one input, "in".
ATTENTION_INPUTS = ("q", "k", "v")


@dataclass(frozen=True)
class LayerShape:
    """What the graph needs of one layer: its query and K/V head counts, whether it has an MLP,
    and whether the MLP reads the layer's input (parallel) rather than the attention's output."""

    num_heads: int
    num_kv_heads: int
    has_mlp: bool = True
    parallel: bool = False

    def __post_init__(self) -> None:
        if self.num_heads < 1 or self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"a layer needs num_kv_heads dividing num_heads (both >= 1), got "
                f"{self.num_heads} query and {self.num_kv_heads} K/V heads"
            )

    @property
    def grouped(self) -> bool:
        """Whether the key and value inputs belong to K/V groups of several query heads."""
        return self.num_kv_heads < self.num_heads

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads


def mlp_name(layer: int) -> str:
    return f"mlp.{layer}"


@dataclass(frozen=True)
class Node:
    """One node: ``name`` (see the module docstring), ``kind`` ("embed", "head", "group",
    "mlp", "logits"), its ``layer`` (-1 for the embeddings, the layer count for the logits),
    ``index`` (head or K/V group within the layer, else 0) and ``heads``: the query heads it
    stands for (a head: itself; a group: its query heads; else empty)."""

    name: str
    kind: str
    layer: int
    index: int = 0
    heads: tuple[int, ...] = ()


@dataclass(frozen=True)
class Edge:
    """From ``sender`` (a node name) into ``receiver``'s ``input`` ("q", "k", "v" or "in")."""

    sender: str
    receiver: str
    input: str

    @property
    def name(self) -> str:
        if self.input in ATTENTION_INPUTS:
            return f"{self.sender}->{self.receiver}<{self.input}>"
        return f"{self.sender}->{self.receiver}"

    @staticmethod
    def parse(name: str) -> Edge:
        """The edge named ``name`` ("16.0->18.g2<k>", "mlp.2->logits"). ValueError otherwise."""
        sender, arrow, rest = name.partition("->")
        if not arrow or not sender or not rest:
            raise ValueError(f"an edge name is 'sender->receiver<input>', got {name!r}")
        if rest.endswith(">") and "<" in rest:
            receiver, _, input_ = rest[:-1].partition("<")
            if input_ not in ATTENTION_INPUTS:
                raise ValueError(f"an edge's input is one of q, k, v, got {input_!r} in {name!r}")
            return Edge(canonical_group(sender), canonical_group(receiver), input_)
        return Edge(canonical_group(sender), canonical_group(rest), "in")


@dataclass(frozen=True)
class Graph:
    """Every node and edge of a model with ``layers`` (see the module docstring). Nodes are in
    the order they write; edges by receiver in the order they read, then by sender."""

    layers: tuple[LayerShape, ...]
    nodes: tuple[Node, ...] = field(init=False)
    edges: tuple[Edge, ...] = field(init=False)

    def __post_init__(self) -> None:
        with _collector_paused():
            nodes, edges = _build(self.layers)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "edges", edges)

    @staticmethod
    def of(layers: Sequence[LayerShape]) -> Graph:
        return Graph(tuple(layers))

    @cached_property
    def node_index(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}

    @cached_property
    def edge_index(self) -> dict[str, int]:
        """Edge name -> its position in ``edges``."""
        return {edge.name: i for i, edge in enumerate(self.edges)}

    def node(self, name: str) -> Node:
        """The node ``name``. ValueError naming the kinds of names for an unknown one."""
        # a name as the graph writes it is its own key: no parsing (EAP looks up every edge's)
        found = self.node_index.get(name) or self.node_index.get(canonical_group(name))
        if found is None:
            raise ValueError(
                f"no node {name!r} in this graph of {len(self.layers)} layers; nodes are "
                "'embed', 'L.H' (head), 'L.gG' (K/V group of a GQA layer), 'mlp.L', 'logits'"
            )
        return found

    def edge(self, name: str) -> Edge:
        """The edge named ``name`` (a K/V group as ``L.gG`` or ``L.kvG``). ValueError for a name
        that is no edge of the graph; for a head's key or value input in a GQA layer, it names
        the K/V group whose input that is."""
        at = self.edge_index.get(name)  # a name as the graph writes it: no parsing
        if at is not None:
            return self.edges[at]
        edge = Edge.parse(name)
        if edge.name not in self.edge_index:
            self.node(edge.sender)
            receiver = self.node(edge.receiver)
            if receiver.kind == "head" and edge.input in ("k", "v"):
                group = self.kv_receiver(receiver.layer, receiver.index)
                if group != receiver.name:
                    members = self.node(group).heads
                    raise ValueError(
                        f"no edge {name!r}: in layer {receiver.layer} the {edge.input} input of "
                        f"head {receiver.name} belongs to its K/V group {group} (query heads "
                        f"{receiver.layer}.{members[0]} to {receiver.layer}.{members[-1]}); use "
                        f"{Edge(edge.sender, group, edge.input).name!r}"
                    )
            raise ValueError(f"no edge {name!r}: {edge.sender} does not write into that input")
        return edge

    def senders(self) -> list[Node]:
        """Nodes that write into the residual stream, in order."""
        return [n for n in self.nodes if n.kind in ("embed", "head", "mlp")]

    def kv_receiver(self, layer: int, head: int) -> str:
        """The node whose k and v inputs query head ``head`` of ``layer`` reads."""
        shape = self.layers[layer]
        if shape.grouped:
            return group_name(layer, head // shape.group_size)
        return head_name(layer, head)

    def edges_into(self, receiver: str, input_: str | None = None) -> list[Edge]:
        return [e for e in self.edges if e.receiver == receiver and input_ in (None, e.input)]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while a graph is built: its edges (70,651 on SmolLM2)
    hold no cycles, and each collection their allocation starts passes over every object of
    the process (a loaded model's: 0.1-0.2 s of CPU per graph, measured)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _build(layers: Sequence[LayerShape]) -> tuple[tuple[Node, ...], tuple[Edge, ...]]:
    n = len(layers)
    nodes = [Node(EMBED, "embed", -1)]
    edges: list[Edge] = []
    written: list[str] = [EMBED]  # senders whose write the next reader sees
    for layer, shape in enumerate(layers):
        heads = [Node(head_name(layer, h), "head", layer, h, (h,)) for h in range(shape.num_heads)]
        groups = []
        if shape.grouped:
            size = shape.group_size
            members = [tuple(range(g * size, g * size + size)) for g in range(shape.num_kv_heads)]
            groups = [
                Node(group_name(layer, g), "group", layer, g, m) for g, m in enumerate(members)
            ]
        nodes += heads + groups
        for head in heads:
            edges += [Edge(s, head.name, "q") for s in written]
        for kv in groups or heads:
            for input_ in ("k", "v"):
                edges += [Edge(s, kv.name, input_) for s in written]
        before_mlp = written if shape.parallel else written + [h.name for h in heads]
        written = written + [h.name for h in heads]
        if shape.has_mlp:
            mlp = Node(mlp_name(layer), "mlp", layer)
            nodes.append(mlp)
            edges += [Edge(s, mlp.name, "in") for s in before_mlp]
            written = [*written, mlp.name]
    nodes.append(Node(LOGITS, "logits", n))
    edges += [Edge(s, LOGITS, "in") for s in written]
    return tuple(nodes), tuple(edges)


__all__ = [
    "ATTENTION_INPUTS",
    "EMBED",
    "LOGITS",
    "Edge",
    "Graph",
    "LayerShape",
    "Node",
    "group_name",
    "head_name",
    "mlp_name",
]

"""The graph of an encoder-decoder: two residual streams, and the cross-attention between them;
and of an image encoder (ViT, DINOv2, CLIP's vision tower): one stream over the class token,
registers and patches, the graph of an encoder-decoder's encoder with the image's readout as its
receiver, its nodes named as a decoder's (graph.py: ``embed``, ``L.H``, ``mlp.L``, ``logits``; no
causal mask, so every position reads every earlier sender).

Blocks are numbered in run order (``models/run_protocol.py``): the encoder's first, then the
decoder's, so every node name is unique across the streams. Nodes, in the order they write:

    embed.encoder   the encoder's embeddings (token or audio-frame features and positions)
    L.H             head H of block L's self-attention (an encoder or a decoder block)
    L.xH            head H of decoder block L's cross-attention: its query reads the decoder's
                    stream, its key and value inputs the encoder's final states
    mlp.L           the MLP of block L
    embed.decoder   the decoder's embeddings
    logits          the decoder's final norm and the output head (an image encoder's readout:
                    its classifier, or its class token's final state): a receiver only

Edges (``graph.Edge``; names as there: ``"0.1->3.x2<k>"``, ``"mlp.1->4.x0<v>"``):

- inside each stream as in a decoder's graph (graph.py): every sender of the stream written
  before a receiver reads into it; a block's MLP also reads its own block's heads (self- and
  cross-attention); a cross-attention head's query reads the decoder's senders before its block
  and the heads of its block's self-attention;
- across the streams: every encoder sender (its embeddings, every head and MLP) into the key and
  value inputs of every cross-attention head. Those inputs read the encoder's final states, the
  encoder's final norm applied to the stream leaving its last block: the norm is recomputed on
  the patched stream (nothing held), as the family's own run does.

The decoder's senders never reach the encoder; the logits read the decoder's senders alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from headlab.circuits.graph import EMBED, LOGITS, Edge, mlp_name
from headlab.results.node_names import head_name

EMBED_PREFIX = "embed."


def cross_name(layer: int, head: int) -> str:
    return f"{layer}.x{head}"


@dataclass(frozen=True)
class StreamNode:
    """One node: ``name``, ``kind`` ("embed", "head", "cross", "mlp", "logits"), ``stream``
    ("encoder", "decoder", "patches"), its block ``layer`` (-1 for embeddings, the block count
    for the logits) and ``index`` (the head, else 0)."""

    name: str
    kind: str
    stream: str
    layer: int
    index: int = 0


@dataclass(frozen=True)
class StreamBlockShape:
    """What the graph needs of one block: its stream, its self-attention's heads and its
    cross-attention's (0 in an encoder block)."""

    stream: str
    num_heads: int
    cross_heads: int = 0


@dataclass(frozen=True)
class StreamGraph:
    """Every node and edge of an encoder-decoder with ``blocks`` (module docstring): nodes in
    the order they write, edges by receiver in the order they read, then by sender."""

    blocks: tuple[StreamBlockShape, ...]
    nodes: tuple[StreamNode, ...] = field(init=False)
    edges: tuple[Edge, ...] = field(init=False)

    def __post_init__(self) -> None:
        nodes, edges = _build(self.blocks)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "edges", edges)

    @cached_property
    def node_index(self) -> dict[str, StreamNode]:
        return {node.name: node for node in self.nodes}

    @cached_property
    def edge_index(self) -> dict[str, int]:
        return {edge.name: i for i, edge in enumerate(self.edges)}

    def node(self, name: str) -> StreamNode:
        found = self.node_index.get(name)
        if found is None:
            raise ValueError(
                f"no node {name!r} in this model of {len(self.blocks)} blocks; nodes are "
                "'embed' (one stream) or 'embed.encoder' and 'embed.decoder', 'L.H' "
                "(self-attention head), 'L.xH' (cross-attention head), 'mlp.L', 'logits'"
            )
        return found

    def edge(self, name: str) -> Edge:
        """The edge named ``name``. ValueError for a name that is no edge of the graph."""
        edge = Edge.parse(name)
        if edge.name not in self.edge_index:
            sender, receiver = self.node(edge.sender), self.node(edge.receiver)
            if sender.stream != receiver.stream and not (
                receiver.kind == "cross" and edge.input in ("k", "v")
            ):
                raise ValueError(
                    f"no edge {name!r}: the {sender.stream}'s {sender.name} reaches the decoder "
                    "only through the cross-attention's k and v"
                )
            raise ValueError(f"no edge {name!r}: {edge.sender} does not write into that input")
        return edge

    def senders(self) -> list[StreamNode]:
        return [n for n in self.nodes if n.kind != "logits"]


def _build(blocks: Sequence[StreamBlockShape]):
    nodes: list[StreamNode] = []
    edges: list[Edge] = []
    streams = {shape.stream for shape in blocks}
    written: list[str] = []  # the senders the next reader of the current stream sees
    earlier: list[str] = []  # the senders of the stream before: what cross-attention k, v read
    stream = None
    for layer, shape in enumerate(blocks):
        if shape.stream != stream:  # a stream starts: its embeddings
            if stream is not None and (stream, shape.stream) != ("encoder", "decoder"):
                raise ValueError(
                    "an encoder-decoder's blocks are encoder blocks, then decoder blocks"
                )
            earlier, stream = written, shape.stream
            name = EMBED_PREFIX + stream if len(streams) > 1 else EMBED  # one stream: a decoder's
            nodes.append(StreamNode(name, "embed", stream, -1))
            written = [nodes[-1].name]
        heads = [
            StreamNode(head_name(layer, h), "head", stream, layer, h)
            for h in range(shape.num_heads)
        ]
        nodes += heads
        for head in heads:
            for input_ in ("q", "k", "v"):
                edges += [Edge(s, head.name, input_) for s in written]
        written = written + [h.name for h in heads]
        if shape.cross_heads:
            if not earlier:
                raise ValueError(f"block {layer}'s cross-attention reads no earlier stream")
            cross = [
                StreamNode(cross_name(layer, h), "cross", stream, layer, h)
                for h in range(shape.cross_heads)
            ]
            nodes += cross
            for head in cross:
                edges += [Edge(s, head.name, "q") for s in written]
                for input_ in ("k", "v"):
                    edges += [Edge(s, head.name, input_) for s in earlier]
            written = written + [h.name for h in cross]
        mlp = StreamNode(mlp_name(layer), "mlp", stream, layer)
        nodes.append(mlp)
        edges += [Edge(s, mlp.name, "in") for s in written]
        written = [*written, mlp.name]
    if stream in (None, "encoder"):
        raise ValueError("an encoder-decoder's graph needs decoder blocks, got none")
    nodes.append(StreamNode(LOGITS, "logits", stream, len(blocks)))
    edges += [Edge(s, LOGITS, "in") for s in written]
    return tuple(nodes), tuple(edges)


def stream_graph_of(model) -> StreamGraph:
    """The graph of a model with the run protocol's two streams (an encoder and a decoder whose
    blocks read it), or with one stream of patches (an image encoder). ValueError (one line)
    for a model of another shape."""
    found = list(model.streams())
    streams = [s.name for s in found]
    patches = len(found) == 1 and found[0].kind == "patches"
    if streams != ["encoder", "decoder"] and not patches:
        raise ValueError(
            f"{model.name} has the streams {streams}; this graph reads an encoder and a "
            "decoder, or one stream of image patches"
        )
    shapes = []
    for block in model.blocks():
        cross = block.cross_attention
        if block.stream == "decoder" and (cross is None or block.reads != "encoder"):
            raise ValueError(f"{model.name}'s decoder block {block.index} reads no encoder")
        if not block.has_mlp or block.parallel:
            raise ValueError(
                f"{model.name}'s block {block.index}: this graph reads blocks with "
                "attention, then an MLP"
            )
        heads = block.attention.num_heads
        shapes.append(
            StreamBlockShape(block.stream, heads, 0 if cross is None else cross.num_heads)
        )
    return StreamGraph(tuple(shapes))


__all__ = [
    "EMBED_PREFIX",
    "StreamBlockShape",
    "StreamGraph",
    "StreamNode",
    "cross_name",
    "stream_graph_of",
]

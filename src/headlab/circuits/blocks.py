"""A model's blocks as a circuit sees them: the run protocol's blocks (``models/run_protocol.py``)
and the graph they make.

The model says which blocks it has, whether each has an MLP and whether the MLP reads the
block's input (parallel: GPT-NeoX, GPT-J); nothing here looks inside a model. A circuit needs a
residual stream that each block adds to, so a model that is not a decoder (an encoder's
post-norm layers have none to split into edges) is refused.
"""

from __future__ import annotations

from headlab.circuits.graph import Graph, LayerShape
from headlab.models.run_protocol import Block, RunnableModel


def layer_shape(block: Block) -> LayerShape:
    """What the graph needs of ``block``."""
    attention = block.attention
    return LayerShape(attention.num_heads, attention.num_kv_heads, block.has_mlp, block.parallel)


def circuit_blocks(model: RunnableModel, encoders: bool = False) -> list[Block]:
    """The model's blocks, in order. ValueError for a model that is not a decoder (unless
    ``encoders``: the score split reads an encoder's stream too, score_sides.py), one with
    another stream, or one whose blocks the model cannot read (its own one-line reason)."""
    if not isinstance(model, RunnableModel):
        name = getattr(model, "name", type(model).__name__)
        raise ValueError(
            f"{name} does not give its blocks (the run protocol: streams, blocks, "
            "run_blocks, unembed)"
        )
    if not encoders and not getattr(model, "causal", False):
        raise ValueError(
            f"{model.name} is not a decoder: circuits need the residual stream of a causal "
            "language model (an encoder's post-norm layers have none to split into edges)"
        )
    streams = model.streams()
    if len(streams) != 1:
        names = ", ".join(s.name for s in streams)
        raise ValueError(f"{model.name} has {len(streams)} streams ({names}): circuits read one")
    return list(model.blocks())


def graph_of(model: RunnableModel) -> Graph:
    """The graph (graph.py) of a model."""
    return Graph.of([layer_shape(b) for b in circuit_blocks(model)])


__all__ = ["circuit_blocks", "graph_of", "layer_shape"]

"""A node whose output a gradient run of EAP-IG on the activations moves (Hanna et al. 2024's
``get_scores_ig_activations``): its value goes to corrupted + alpha (clean - corrupted), with
the gradient cut there (theirs) or flowing through it (``eap-ig-senders``), see
``attribution.activation_scores``."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.graph import Graph
from headlab.circuits.patching import Patcher


@dataclass(frozen=True)
class Moved:
    """A node whose output a gradient run moves to corrupted + alpha (clean - corrupted):
    ``kind`` "attention" (the layer's head outputs) or "mlp", of ``layer``. ``cut``: the
    moved output is a constant, so no gradient flows through it to what it reads (Hanna et
    al.'s ``get_scores_ig_activations`` replaces it so); else the gradient flows through it
    as through the unmoved node (only its value moves)."""

    kind: str
    layer: int
    cut: bool = field(default=False, compare=False)  # the same node either way


def moved_hooks(patcher: Patcher, moved: Moved | None, alpha: float):
    """Hooks for ``gradient_run`` that move ``moved`` to ``alpha`` (None: nothing)."""
    if moved is None:
        return lambda stack: None
    block = patcher.runner.blocks[moved.layer]
    ends = (patcher.clean, patcher.corrupted)
    clean, corrupted = (
        (c.head_outputs if moved.kind == "attention" else c.mlp)[moved.layer] for c in ends
    )
    value = (corrupted + alpha * (clean - corrupted)).detach()

    def to_value(t: Tensor) -> Tensor:
        return value if moved.cut else value + (t - t.detach())

    def hooks(stack: ExitStack) -> None:
        if moved.kind == "attention":
            stack.enter_context(intervene(block.attention, "head_outputs", to_value))
        else:
            stack.enter_context(intervene(block, "mlp_out", to_value))

    return hooks


def sender_node(graph: Graph, sender: str) -> Moved | None:
    """The node whose output moves when ``sender``'s does: its layer's attention for a head,
    the MLP, None for the embeddings (the input itself is interpolated)."""
    node = graph.node(sender)
    if node.kind == "embed":
        return None
    return Moved("attention" if node.kind == "head" else "mlp", node.layer)


__all__ = ["Moved", "moved_hooks", "sender_node"]

"""A model's nodes as units of node attribution and of the patching sweep, and where each one's
output is read in a run.

The units are the graph's nodes that have an output of their own (graph.py's names):

    L.H     query head H of layer L: its output before W_O, the attention's ``head_outputs``
            site, (batch, head, pos, d_head) at [:, H]
    L.gG    K/V group G of a GQA layer: its keys and values, the ``k`` and ``v`` sites,
            (batch, kv_head, pos, d_head) at [:, G] (after the family's projection, norm and
            rotary)
    mlp.L   the MLP of layer L: the block's ``mlp_out`` site, (batch, pos, d_model)

``keep_sites`` keeps the tensors at those sites in one run (with their autograd graph when the
run has one); ``NodeSites.delta`` is one unit's corrupted minus clean value. Every site is
reached through ``intervene`` (models/run_protocol.py): no torch hooks here.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.attention.sites import BLOCK_SITES
from headlab.circuits.graph import Graph, Node
from headlab.models.run_protocol import Block

#: Site keys: (layer, "head_outputs" | "k" | "v" | "mlp_out"), or another site of the block
#: or its attention (``resid_in``...).
SiteKey = tuple[int, str]


def units(graph: Graph) -> list[Node]:
    """The graph's heads, K/V groups and MLPs, in the order they write."""
    return [node for node in graph.nodes if node.kind in ("head", "group", "mlp")]


def unit_sites(node: Node) -> list[SiteKey]:
    """The sites that hold ``node``'s output."""
    if node.kind == "head":
        return [(node.layer, "head_outputs")]
    if node.kind == "group":
        return [(node.layer, "k"), (node.layer, "v")]
    return [(node.layer, "mlp_out")]


def needed_sites(nodes: Sequence[Node]) -> list[SiteKey]:
    return list(dict.fromkeys(key for node in nodes for key in unit_sites(node)))


def keep_sites(blocks: Sequence[Block], keys: Sequence[SiteKey], store: dict):
    """Interventions that put the tensor at each of ``keys`` into ``store[key]``, unchanged
    (the run goes on with the same tensor, so a gradient taken at it is the metric's)."""

    def keep(key: SiteKey):
        return lambda t: store.__setitem__(key, t)

    def enter(stack: ExitStack) -> None:
        for layer, site in keys:
            block = blocks[layer]
            target = block if site in BLOCK_SITES else block.attention
            stack.enter_context(intervene(target, site, keep((layer, site))))

    return enter


def unit_slice(node: Node, tensor: Tensor) -> Tensor:
    """``node``'s part of the tensor at one of its sites: [:, index] of a head's or group's,
    the whole MLP output."""
    return tensor if node.kind == "mlp" else tensor[:, node.index]


@dataclass
class NodeSites:
    """The tensors at the units' sites on the clean and on the corrupted run (SiteKey ->
    tensor, without autograd)."""

    clean: dict[SiteKey, Tensor]
    corrupted: dict[SiteKey, Tensor]

    def delta(self, node: Node, key: SiteKey) -> Tensor:
        """Corrupted minus clean of ``node`` at ``key``: (batch, pos, d_head) for a head or
        group, (batch, pos, d_model) for an MLP."""
        return unit_slice(node, self.corrupted[key]) - unit_slice(node, self.clean[key])


__all__ = [
    "NodeSites",
    "SiteKey",
    "keep_sites",
    "needed_sites",
    "unit_sites",
    "unit_slice",
    "units",
]

"""The views and edits of ``HeadModel`` for the models headlab builds from its own attention.

``NativeModel`` is the part of the interface that a model made of ``MultiHeadAttention`` layers
gets from those layers alone: the same weights viewed with fewer heads
(``attention.head_groups.grouped_view``), heads removed from the weights
(``attention.pruned.prune_attention``), new W_Q and W_K, and the parameter count. A family class
provides ``attention_layers()`` and ``with_attention(replace)`` (the same model, weights shared,
with some layers' attention replaced), and inherits the rest.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import Tensor

from headlab.attention.head_groups import grouped_view
from headlab.attention.pruned import prune_attention


def check_layers(layers: Iterable[int], num_layers: int) -> list[int]:
    """``layers`` as a list, ValueError naming the first index out of range."""
    chosen = list(layers)
    for i in chosen:
        if not 0 <= i < num_layers:
            raise ValueError(f"layer must be in [0, {num_layers}), got {i}")
    return chosen


class NativeModel:
    """Mixin: ``with_head_view``, ``without_heads``, ``with_query_key_weights`` and
    ``parameter_count`` from ``attention_layers()`` and ``with_attention(replace)``."""

    def with_head_view(self, num_heads: int, layers: Sequence[int] | None = None):
        chosen = check_layers(range(self.num_layers) if layers is None else layers, self.num_layers)
        attention = self.attention_layers()
        return self.with_attention({i: grouped_view(attention[i], num_heads) for i in chosen})

    def without_heads(self, heads: Mapping[int, Iterable[int]]):
        check_layers(heads, self.num_layers)
        attention = self.attention_layers()
        return self.with_attention(
            {i: prune_attention(attention[i], set(h)) for i, h in heads.items() if set(h)}
        )

    def with_query_key_weights(self, weights: Mapping[int, tuple[Tensor, Tensor]]):
        check_layers(weights, self.num_layers)
        attention = self.attention_layers()
        replaced = {}
        for i, (w_q, w_k) in weights.items():
            new = copy.deepcopy(attention[i])
            old_q, old_k, _ = new.projection_weights()
            with torch.no_grad():
                old_q.copy_(w_q.to(old_q.dtype))
                old_k.copy_(w_k.to(old_k.dtype))
            replaced[i] = new
        return self.with_attention(replaced)

    def parameter_count(self) -> int:
        """Distinct parameters (tied weights once), K/V rows copied by pruning once."""
        total = sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())
        for attention in self.attention_layers():
            copies = getattr(attention, "duplicated_kv_heads", 0)
            if copies:
                per_row = attention.embed_dim + int(attention.in_proj_bias is not None)
                total -= 2 * copies * attention.head_dim * per_row
        return total

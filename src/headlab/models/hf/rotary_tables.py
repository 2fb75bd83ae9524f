"""A transformers model's rotary tables, read where transformers declares them.

Every family of the route with rotary positions keeps one rotary module on its body as
``rotary_emb`` (``model.<base_model_prefix>.rotary_emb``: Llama, Mistral, Qwen, Gemma, GPT-NeoX,
Phi...), whose ``forward(x, position_ids)`` gives the cos and sin tables (frequencies, scaling
types and ``attention_scaling`` included), and rotates with its modeling module's
``rotate_half`` (dimension k pairs with k + d_rot / 2). A family without that module has no
rotary positions here; one whose tables depend on the layer type (Gemma 3's local and global
layers: a ``layer_type`` argument) or that rotates otherwise (no ``rotate_half``) is refused in
one line.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable

import torch
from torch import Tensor, nn


def rotary_tables(
    name: str, model: nn.Module, positions: Tensor, head_dim: int
) -> tuple[Tensor, Tensor, Callable[[Tensor], Tensor]]:
    """(cos, sin) (pos, d_rot) float64 at ``positions`` (pos,) and the family's rotate_half.
    ValueError (one line) for a model without one rotary table of that form."""
    body = getattr(model, getattr(model, "base_model_prefix", ""), model)
    table = getattr(body, "rotary_emb", None)
    if not isinstance(table, nn.Module):
        raise ValueError(f"rotary offsets need a model with rotary positions; {name} has none")
    if "layer_type" in inspect.signature(table.forward).parameters:
        raise ValueError(
            f"rotary-aware composition reads one rotary table, {name} has one per "
            f"layer type ({type(table).__name__})"
        )
    family = sys.modules[type(table).__module__]
    rotate_half = getattr(family, "rotate_half", None)
    if rotate_half is None:
        raise ValueError(
            f"rotary-aware composition reads rotate-half rotary (Llama's); "
            f"{family.__name__} has no rotate_half"
        )
    probe = next(table.buffers(), None)
    device = None if probe is None else probe.device
    dummy = torch.zeros(1, positions.shape[0], head_dim, device=device)
    with torch.no_grad():
        cos, sin = table(dummy, positions[None].to(dummy.device))
    return cos[0].double().cpu(), sin[0].double().cpu(), rotate_half


__all__ = ["rotary_tables"]

"""A head mask from the heads to zero: what pruning, ablation and a model's own checks pass to
``HeadModel.run`` (one (head,) tensor per layer, 1 keeps a head, 0 removes it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from headlab.models.interface import HeadModel


def as_mask(model: HeadModel, heads: Mapping[int, Iterable[int]]) -> list[torch.Tensor]:
    """The head mask (one (head,) tensor per layer) that zeroes the given heads."""
    mask = [torch.ones(h) for h in model.heads_per_layer]
    for layer, removed in heads.items():
        for h in removed:
            mask[layer][h] = 0.0
    return mask

"""How far one set of sentence embeddings moved from another."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _check(a: Tensor, b: Tensor) -> None:
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(
            f"expected two (n_texts, d_model) tensors of one shape, got {tuple(a.shape)} "
            f"and {tuple(b.shape)}"
        )


def mean_cosine(reference: Tensor, other: Tensor) -> float:
    """Mean over texts of cos(reference_i, other_i); both (n_texts, d_model)."""
    _check(reference, other)
    return F.cosine_similarity(reference, other, dim=1).mean().item()


def nearest_neighbours(embeddings: Tensor) -> Tensor:
    """(n_texts, d_model) -> (n_texts,) index of each text's most cosine-similar other text."""
    x = F.normalize(embeddings, dim=1)
    sim = x @ x.T
    sim.fill_diagonal_(float("-inf"))
    return sim.argmax(dim=1)


def nn_agreement(reference: Tensor, other: Tensor) -> float:
    """Share of texts whose nearest neighbour (cosine, itself excluded) is the same in both.

    Needs at least 2 texts; raises ValueError otherwise.
    """
    _check(reference, other)
    if reference.shape[0] < 2:
        raise ValueError(f"nearest neighbours need at least 2 texts, got {reference.shape[0]}")
    same = nearest_neighbours(reference) == nearest_neighbours(other)
    return same.to(torch.float64).mean().item()

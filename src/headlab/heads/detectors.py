"""Head kinds of the interpretability literature, each a score in [0, 1] per layer x head.

The input is a batch of random token sequences r (length n, drawn from ``vocabulary``) repeated
twice: s = r r, positions 0 .. 2n-1 (Olsson et al. 2022, "In-context learning and induction
heads"; the same scores as TransformerLens' head detectors). With w = a head's weights:
    previous_token   mean over queries q >= 1 of w[q, q-1]
    duplicate_token  mean over queries q = n+i of w[q, i]     (the earlier copy of the same token)
    induction        mean over queries q = n+i, i < n-1, of w[q, i+1]
                     (the token that followed the earlier copy: what to predict next)
A random sequence has no structure to use but the repeat, so a high induction score means the
head looks up "what came after this token last time".
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.heads.tracing import attention_weights
from headlab.limits import check_int
from headlab.models.interface import HeadModel, TokenBatch
from headlab.results.head_statistics import DETECTOR_NAMES as DETECTORS

LENGTH = 50  # tokens of each random sequence (seen twice: 100 positions) unless asked otherwise


def repeated_random_tokens(vocabulary: Tensor, length: int, count: int, seed: int = 0) -> Tensor:
    """(count, 2 * length) int64: ``count`` random sequences of ``length`` ids, each twice."""
    if vocabulary.numel() < 2:
        raise ValueError(f"need at least 2 distinct token ids, got {vocabulary.numel()}")
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, vocabulary.numel(), (count, length), generator=gen)
    first = vocabulary[picks]
    return torch.cat([first, first], dim=1)


def detector_scores(weights: Tensor, length: int) -> dict[str, Tensor]:
    """weights (batch, head, 2n, 2n) on repeated sequences of ``length`` n -> name -> (head,)."""
    n = length
    prev = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (batch, head, 2n - 1)
    second = weights[:, :, n:, :]  # queries n .. 2n-1: (batch, head, n, 2n)
    duplicate = second[:, :, :, :n].diagonal(dim1=-2, dim2=-1)  # w[n+i, i]
    induction = second[:, :, : n - 1, 1:n].diagonal(dim1=-2, dim2=-1)  # w[n+i, i+1]
    return {
        "previous_token": prev.mean(dim=(0, 2)),
        "duplicate_token": duplicate.mean(dim=(0, 2)),
        "induction": induction.mean(dim=(0, 2)),
    }


def default_length(model: HeadModel) -> int:
    """The length of the random sequences when none is asked: ``LENGTH`` tokens, or half the
    model's positions when it has fewer than 2 * ``LENGTH`` (each sequence is seen twice in one
    input); 0 (no detectors) for a model of fewer than 4 positions."""
    length = min(LENGTH, model.max_positions // 2)
    return length if length >= 2 else 0


def check_asked_length(length: int) -> int:
    """A length asked before the model is known: 0 (no detectors) or more (ValueError naming
    ``detector_length``); ``check_length`` bounds it by the model's positions."""
    return check_int("detector_length", length, low=0)


def check_length(model: HeadModel, length: int) -> int:
    """``length`` if two copies fit in the model's positions; ValueError naming
    ``detector_length`` otherwise."""
    if model.max_positions < 4:
        raise ValueError(
            f"detector_length: the detectors need 4 positions (a sequence of 2, twice), the "
            f"model has {model.max_positions}"
        )
    return check_int("detector_length", length, low=2, high=model.max_positions // 2)


def detect_heads(
    model: HeadModel, vocabulary: Tensor, length: int, count: int = 8, seed: int = 0
) -> dict[str, list[list[float]]]:
    """The three scores of every head of ``model`` (layer, head) on ``count`` sequences."""
    check_length(model, length)
    ids = repeated_random_tokens(vocabulary, length, count, seed)
    batch = TokenBatch(
        input_ids=ids, attention_mask=torch.ones_like(ids, dtype=torch.bool), tokens=[]
    )
    _, weights = attention_weights(model, batch)
    per_layer = [detector_scores(w, length) for w in weights]
    return {name: [s[name].tolist() for s in per_layer] for name in DETECTORS}

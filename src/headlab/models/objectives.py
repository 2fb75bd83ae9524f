"""The objectives a model is judged by (``HeadModel.objective``), for any model.

A language model's is the next-token cross-entropy of its real tokens. A sentence encoder has no
labels to use, so its objective is an in-batch contrastive loss (InfoNCE) between the embeddings
of the first half and the second half of each text (split at the middle word). For a batch of n
texts with normalised half-embeddings a_i, b_i and temperature tau:
    logits_ij = a_i . b_j / tau
    L = (CE(logits, i -> i) + CE(logits^T, i -> i)) / 2
It is low when each first half is closer to its own second half than to other texts' ones, so its
gradient is not zero at the trained model (Michel et al.'s importance needs one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.models.interface import HeadMask, HeadModel, TokenBatch

#: The encoders' InfoNCE temperature.
TEMPERATURE = 0.05
NEXT_TOKEN = "next-token cross-entropy (nats)"
CONTRASTIVE = "in-batch InfoNCE between the two halves of each text (temperature {tau})"


def describe(model: HeadModel, temperature: float = TEMPERATURE) -> str:
    """The objective of ``model`` in words, as results files record it."""
    if model.objective_kind == "next-token":
        return NEXT_TOKEN
    if model.objective_kind == "contrastive":
        return CONTRASTIVE.format(tau=temperature)
    raise ValueError(f"{model.name} has no objective (objective_kind 'none')")


def next_token_loss(logits: Tensor, batch: TokenBatch) -> Tensor:
    """Cross-entropy of tokens 1..n-1 of each text given the ones before (padding ignored)."""
    targets = batch.input_ids[:, 1:].masked_fill(~batch.attention_mask[:, 1:], -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100)


def split_halves(texts: list[str]) -> tuple[list[str], list[str]]:
    """Each text split at its middle word into (first halves, second halves).

    Raises ValueError naming the first text with fewer than 2 words.
    """
    firsts, seconds = [], []
    for text in texts:
        words = text.split()
        if len(words) < 2:
            raise ValueError(f"each text needs at least 2 words to be split, got {text!r}")
        mid = len(words) // 2
        firsts.append(" ".join(words[:mid]))
        seconds.append(" ".join(words[mid:]))
    return firsts, seconds


def info_nce(a: Tensor, b: Tensor, temperature: float) -> Tensor:
    """Symmetric InfoNCE of paired (n, d_model) embeddings (row i of a pairs with row i of b)."""
    logits = F.normalize(a, dim=1) @ F.normalize(b, dim=1).T / temperature
    labels = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def contrastive_objective(
    model: HeadModel,
    texts: list[str],
    head_mask: HeadMask = None,
    *,
    temperature: float = TEMPERATURE,
    max_length: int = 128,
) -> Tensor:
    """The loss L(xi) of one batch of ``texts`` (at least 2) with head_mask xi (one (head,)
    tensor per layer): InfoNCE between the ``run`` embeddings of the halves. A scalar with
    autograd to ``head_mask``."""
    if len(texts) < 2:
        raise ValueError(f"the in-batch objective needs at least 2 texts, got {len(texts)}")
    firsts, seconds = split_halves(texts)
    a = model.run(model.tokenize(firsts, max_length), head_mask)
    b = model.run(model.tokenize(seconds, max_length), head_mask)
    return info_nce(a, b, temperature)

"""How far a variant of a model (collapsed, pruned) moved from the original, on a corpus.

A language model (``objective_kind`` "next-token") is judged by what it predicts: perplexity of
the corpus's next tokens, and the share of real positions whose top next token is the original's
(``next_token_agreement``). A sentence encoder by its embeddings: mean cosine to the original
ones and nearest-neighbour agreement (``headlab.heads.embedding_shift``). Both come from ``run``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.heads.embedding_shift import mean_cosine, nn_agreement
from headlab.models.interface import HeadModel
from headlab.results.quality_measures import (
    CAUSAL_MEASURES,
    ENCODER_MEASURES,
)


@dataclass(frozen=True)
class Reference:
    """The original model's outputs: embeddings (n, d_model), or each batch's top next tokens."""

    embeddings: Tensor | None
    top_tokens: list[Tensor] | None


def _batches(model: HeadModel, texts: list[str], max_length: int, batch_size: int):
    for start in range(0, len(texts), batch_size):
        yield model.tokenize(texts[start : start + batch_size], max_length)


def _decoder_pass(model, texts, max_length, batch_size):
    """(top tokens per batch (batch, pos-1), summed cross-entropy, counted tokens)."""
    tops, loss, count = [], 0.0, 0
    with torch.inference_mode():
        for batch in _batches(model, texts, max_length, batch_size):
            logits = model.run(batch)[:, :-1]  # predictions of tokens 1..
            real = batch.attention_mask[:, 1:]
            targets = batch.input_ids[:, 1:]
            ce = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
            loss += float(ce[real].double().sum())
            count += int(real.sum())
            tops.append(torch.where(real, logits.argmax(-1), -1))
    return tops, loss, count


def _embeddings(model, texts, max_length, batch_size) -> Tensor:
    with torch.inference_mode():
        return torch.cat([model.run(b) for b in _batches(model, texts, max_length, batch_size)])


def _language_model(model: HeadModel) -> bool:
    """Whether ``run`` gives next-token logits (else it gives embeddings to compare)."""
    if model.objective_kind == "none":
        raise ValueError(f"{model.name} has no output to compare variants by (objective 'none')")
    return model.objective_kind == "next-token"


def reference(model: HeadModel, texts: list[str], max_length: int, batch_size: int) -> Reference:
    """What variants of ``model`` are compared with."""
    if _language_model(model):
        return Reference(None, _decoder_pass(model, texts, max_length, batch_size)[0])
    return Reference(_embeddings(model, texts, max_length, batch_size), None)


def measures(
    model: HeadModel, texts: list[str], original: Reference, max_length: int, batch_size: int
) -> dict[str, float]:
    """The variant ``model`` against ``original`` (see the module docstring): the
    ``CAUSAL_MEASURES`` of a language model, the ``ENCODER_MEASURES`` of a sentence encoder."""
    if _language_model(model):
        tops, loss, count = _decoder_pass(model, texts, max_length, batch_size)
        same = sum(
            int(((a == b) & (b >= 0)).sum()) for a, b in zip(tops, original.top_tokens, strict=True)
        )
        values = (math.exp(loss / max(count, 1)), same / max(count, 1))
        return dict(zip(CAUSAL_MEASURES, values, strict=True))
    emb = _embeddings(model, texts, max_length, batch_size)
    values = (mean_cosine(original.embeddings, emb), nn_agreement(original.embeddings, emb))
    return dict(zip(ENCODER_MEASURES, values, strict=True))

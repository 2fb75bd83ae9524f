"""Attention patterns of a trained model's heads, as square targets for ``analysis.expressivity``.

``head_patterns`` takes the first texts of a corpus that have at least n tokens, cuts each to n,
and returns one (n, n) pattern per (text, layer, head) picked: rows are queries, columns keys,
each row sums to one (the convention of ``AttentionTrace.weights``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from headlab.heads.tracing import attention_weights
from headlab.models.interface import HeadModel


def head_patterns(
    model: HeadModel, texts: list[str], n: int, count: int, *, seed: int = 0
) -> np.ndarray:
    """(count, n, n) float64 attention patterns of randomly chosen (seeded) heads on texts of
    exactly n tokens. Raises ValueError when no text of the corpus has n tokens."""
    batch = model.tokenize(texts, max_length=n)
    full = batch.attention_mask.all(dim=1)  # (batch,) texts with n real tokens
    if batch.input_ids.shape[1] != n or not bool(full.any()):
        raise ValueError(f"no text of the corpus has {n} tokens; use a shorter length")
    _, per_layer = attention_weights(model, batch)
    # (layer, batch, head, q_pos, k_pos) for the full texts only
    weights = torch.stack([w[full] for w in per_layer]).double().numpy()
    layers, texts_n, heads = weights.shape[:3]
    rng = np.random.default_rng(seed)
    picks = rng.choice(
        layers * texts_n * heads, size=min(count, layers * texts_n * heads), replace=False
    )
    out = [weights[np.unravel_index(i, (layers, texts_n, heads))] for i in picks]
    return np.stack(out)


def patterns_by_length(
    model: HeadModel,
    texts: list[str],
    seq_lens: tuple[int, ...],
    count: int,
    *,
    seed: int = 0,
    on_step: Callable[[int, int], None] | None = None,
) -> dict[int, np.ndarray]:
    """seq_len -> (count, n, n) ``head_patterns`` for each length: the trained heads'
    attention that ``measure_expressivity`` fits beside random targets.

    ``on_step(done, total)`` after each length (one forward pass of the model each).
    """
    patterns = {}
    for done, n in enumerate(seq_lens, start=1):
        patterns[n] = head_patterns(model, texts, n, count, seed=seed)
        if on_step:
            on_step(done, len(seq_lens))
    return patterns

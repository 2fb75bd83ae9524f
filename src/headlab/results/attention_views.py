"""Per-head attention weights on a text as plain arrays: what the analyses of a text return
(``headlab.analysis.text_attention``, ``headlab.heads.model_text_attention``) and the explorers
encode.

Weights follow ``AttentionTrace.weights``: rows are queries, columns keys, rows sum to one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AttentionView:
    """One way of computing the weights: e.g. "8 heads" or "1 head, same weights".

    weights: (layer, head, q_pos, k_pos) float array, or (layer, head, bins, bins) when binned.
    """

    name: str
    weights: np.ndarray


@dataclass(frozen=True)
class TextAttention:
    """The views of one text. ``total_tokens`` > len(tokens) when the text was cut to a
    limit (the views then cover the first len(tokens) tokens); ``cut_reason`` says which."""

    tokens: list[str]
    views: list[AttentionView]
    total_tokens: int
    cut_reason: str = ""

    @property
    def cut(self) -> bool:
        return self.total_tokens > len(self.tokens)

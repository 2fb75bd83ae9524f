"""One text's attention weights in every layer and head of a model: what the report's explorer
draws, computed here so that ``headlab.report`` only renders.

``text_attention(model, text, max_tokens=...)`` tokenizes the text (cut to ``max_tokens`` and
saying so), runs the model's explicit path once and returns each layer's weights
(head, q_pos, k_pos) with the token strings. Works on any ``HeadModel`` (the MiniLM encoder,
SmolLM2, a folder); ``collapsed_text_attention`` adds the encoder viewed with one head per layer
(the same trained weights), which only models with ``with_num_heads`` offer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from headlab.limits import check_fits, check_int
from headlab.models.interface import HeadModel

#: The report's default cut: the explorer bins longer texts anyway, and every head's T x T weights
#: travel inside the page.
REPORT_MAX_TOKENS = 256
#: The most tokens a text view takes (30 layers x 9 heads x 1024^2 float32 = 1.1 GB in the trace).
MAX_TOKENS = 1024


@dataclass(frozen=True)
class TextAttention:
    """model: the model's name; tokens: the token strings as analysed; text_tokens: the text's
    length before the cut; layers: each layer's weights (head, q_pos, k_pos), float64, rows sum
    to one over the visible keys."""

    model: str
    tokens: list[str]
    text_tokens: int
    layers: list[np.ndarray]

    @property
    def cut(self) -> bool:
        """Whether the text was longer than what was analysed."""
        return self.text_tokens > len(self.tokens)


def _trace_bytes(model: HeadModel, n_tokens: int) -> int:
    """Scores and weights of every head, and each head's contribution (n_tokens x embed)."""
    embed = model.attention_layers()[0].embed_dim
    per_head = n_tokens * n_tokens * 2 + n_tokens * embed
    return 4 * sum(model.heads_per_layer) * per_head


def text_attention(model: HeadModel, text: str, *, max_tokens: int | None = None) -> TextAttention:
    """``text`` through ``model``'s explicit path, cut to ``max_tokens`` (default REPORT_MAX_TOKENS
    or the model's limit if smaller): a TextAttention. Raises ValueError for an empty text or
    max_tokens outside 2..min(MAX_TOKENS, the model's limit), MemoryError (via ``check_fits``)
    when the traces would not fit in memory."""
    if max_tokens is None:
        max_tokens = min(REPORT_MAX_TOKENS, model.max_positions)
    check_int("max_tokens", max_tokens, low=2, high=min(MAX_TOKENS, model.max_positions))
    if not text.strip():
        raise ValueError("expected a text with at least one token, got an empty text")
    text_tokens = model.count_tokens(text)
    batch = model.tokenize([text], max_tokens)
    tokens = batch.tokens[0]
    check_fits(f"attention of {len(tokens)} tokens", _trace_bytes(model, len(tokens)))
    with torch.no_grad():
        _, traces = model.trace_batch(batch)
    # trace weights: (batch=1, head, q_pos, k_pos) per layer
    layers = [t.weights[0].double().numpy() for t in traces]
    return TextAttention(model.name, list(tokens), text_tokens, layers)


def collapsed_text_attention(
    model: HeadModel, text: str, *, max_tokens: int | None = None
) -> TextAttention | None:
    """The same text through ``model.with_num_heads(1)`` (every layer one head, same weights), or
    None for a model without that view (a decoder with grouped K/V heads)."""
    with_num_heads = getattr(model, "with_num_heads", None)
    if with_num_heads is None:
        return None
    return text_attention(with_num_heads(1), text, max_tokens=max_tokens)

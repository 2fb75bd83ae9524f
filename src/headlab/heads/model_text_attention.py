"""One text's attention weights in every layer and head of a trained model: what the report's
model explorer draws, computed here so that ``headlab.report`` only renders.

``model_text_attention(model, text)`` tokenizes the text (cut to ``max_tokens``; the result's
``total_tokens`` says how long it was), records every layer's weights in one run and returns the
views of ``analysis.text_attention``: "<h> heads" (layer, head, q_pos, k_pos) and "1 head, same
weights": every layer's trained parameters viewed as one head (``HeadModel.with_head_view``).
Works on any ``HeadModel``.
"""

from __future__ import annotations

import numpy as np

from headlab.attention.one_thread import one_torch_thread
from headlab.heads.tracing import attention_weights
from headlab.limits import check_fits, check_int
from headlab.models.interface import HeadModel
from headlab.results.attention_views import AttentionView, TextAttention

#: The report's default cut: every head's weights travel inside the page, at one cell a token
#: (SmolLM2's 300 heads and views at 512 tokens: about 6 MB, docs/benchmarks.md).
REPORT_MAX_TOKENS = 512
#: The most tokens a text view takes (30 layers x 9 heads x 1024^2 float32 = 1.1 GB of weights).
MAX_TOKENS = 1024


def _trace_bytes(model: HeadModel, n_tokens: int) -> int:
    """Scores and weights of every head, and each head's contribution (n_tokens x embed)."""
    embed = model.attention_layers()[0].embed_dim
    per_head = n_tokens * n_tokens * 2 + n_tokens * embed
    return 4 * sum(model.heads_per_layer) * per_head


def _weights(model: HeadModel, batch) -> np.ndarray:
    """(layer, head, q_pos, k_pos) float64 from one run over a one-text batch."""
    heads = set(model.heads_per_layer)
    if len(heads) != 1:
        raise ValueError(f"expected the same head count in every layer, got {sorted(heads)}")
    _, weights = attention_weights(model, batch)  # each (batch=1, head, q_pos, k_pos)
    return np.stack([w[0].double().numpy() for w in weights])


def model_text_attention(
    model: HeadModel, text: str, *, max_tokens: int | None = None
) -> TextAttention:
    """``text`` through ``model`` (cut to ``max_tokens``, default REPORT_MAX_TOKENS or the model's
    limit if smaller), as views "<h> heads" and "1 head, same weights". Raises ValueError for an
    empty text, a model whose layers differ in head count (pruned), or max_tokens outside
    2..min(MAX_TOKENS, the model's limit); MemoryError (via ``check_fits``) when the weights
    would not fit in memory."""
    if max_tokens is None:
        max_tokens = min(REPORT_MAX_TOKENS, model.max_positions)
    check_int("max_tokens", max_tokens, low=2, high=min(MAX_TOKENS, model.max_positions))
    if not text.strip():
        raise ValueError("expected a text with at least one token, got an empty text")
    batch = model.tokenize([text], max_tokens)
    tokens = list(batch.tokens[0])
    check_fits(f"attention of {len(tokens)} tokens", _trace_bytes(model, len(tokens)))
    heads = model.heads_per_layer[0]
    # At most MAX_TOKENS tokens of one text: small matrices, whose ops on torch's threads wait in
    # barriers while another process holds a core (MiniLM at 256 tokens beside one: 1.10 s on
    # 2 threads, 0.15 s on one; idle: 0.09 s and 0.14 s; one_torch_thread).
    with one_torch_thread(when_busy=True):
        views = [
            AttentionView(f"{heads} heads", _weights(model, batch)),
            AttentionView("1 head, same weights", _weights(model.with_head_view(1), batch)),
        ]
    total = max(len(tokens), model.count_tokens(text))
    return TextAttention(tokens, views, total, _cut_reason(model, max_tokens, total))


def _cut_reason(model: HeadModel, max_tokens: int, total: int) -> str:
    """Which limit cut a text of ``total`` tokens to ``max_tokens``: the page's, or the model's."""
    if total <= max_tokens:
        return ""
    if max_tokens < model.max_positions:
        reads = f"{model.max_positions} tokens {model.name} reads"
        return f"the page shows at most {max_tokens} of the {reads}"
    return f"{model.name} reads at most {max_tokens} tokens"

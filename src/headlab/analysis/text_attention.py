"""Per-head attention weights on a text: a seeded layer on the text's words (here), or a trained
model (``headlab.heads.model_text_attention``).

Both return a ``TextAttention``: the tokens and one ``AttentionView`` per way of computing the
weights (e.g. "8 heads" and "1 head, same weights"), as plain arrays for the report to draw.
Weights follow ``AttentionTrace.weights``: rows are queries, columns keys, rows sum to one.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from headlab.attention.module import MultiHeadAttention
from headlab.results.attention_views import AttentionView, TextAttention
from headlab.results.binning import MAX_BINS, bin_edges


def words(text: str) -> list[str]:
    """Whitespace tokens of ``text``; ValueError when there are none."""
    tokens = text.split()
    if not tokens:
        raise ValueError("--text must contain at least one word, got an empty text")
    return tokens


def seeded_layer(d_model: int, num_heads: int, seed: int) -> MultiHeadAttention:
    """A MultiHeadAttention (batch first, eval mode) with N(0, 2/d_model) parameters from ``seed``.

    The scale is larger than torch's default init so that heads show structure, not near-uniform
    rows.
    """
    gen = torch.Generator().manual_seed(seed)
    module = MultiHeadAttention(d_model, num_heads, batch_first=True)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / d_model) ** 0.5)
    return module.eval()


def embed(tokens: list[str], d_model: int, seed: int) -> torch.Tensor:
    """(batch=1, q_pos, d_model): one seeded vector per distinct token plus a position code.

    Repeated words get the same vector (only the position differs), so the page is reproducible
    and shows the same word the same way.
    """
    return (
        torch.stack([_token_vector(t, d_model, seed) for t in tokens])
        + _positions(len(tokens), d_model)
    ).unsqueeze(0)


def binned_weights(
    module: MultiHeadAttention, x: torch.Tensor, edges: np.ndarray, rows: int = 256
) -> np.ndarray:
    """Self-attention weights of ``x`` (1, n, E) binned to ``edges``, (head, bins, bins) float64.

    Computed bin by bin over the queries (about ``rows`` queries at a time), so that memory grows
    with n x rows, never n x n: a 10k-word text needs megabytes, not gigabytes.
    """
    bins = len(edges) - 1
    out = np.zeros((module.num_heads, bins, bins))
    start_bin = 0
    with torch.no_grad():
        while start_bin < bins:
            stop_bin = start_bin + 1
            while stop_bin < bins and edges[stop_bin + 1] - edges[start_bin] <= rows:
                stop_bin += 1
            lo, hi = int(edges[start_bin]), int(edges[stop_bin])
            weights = module.trace(x[:, lo:hi], x, x).weights[0]  # (head, hi - lo, n)
            local = edges[start_bin : stop_bin + 1] - lo
            summed = np.add.reduceat(weights.double().numpy(), edges[:-1], axis=-1)
            summed = np.add.reduceat(summed, local[:-1], axis=-2)  # (head, bins here, bins)
            out[:, start_bin:stop_bin] = summed / np.diff(local)[:, None]
            start_bin = stop_bin
    return out


def seeded_text_attention(
    tokens: list[str],
    *,
    d_model: int = 64,
    num_heads: int = 8,
    seed: int = 0,
    max_bins: int = MAX_BINS,
) -> TextAttention:
    """``tokens`` embedded by ``embed`` through ``seeded_layer`` and its one-head view.

    Views "<h> heads" (1, h, bins, bins) and "1 head, same weights" (1, 1, bins, bins), binned to
    ``bin_edges(len(tokens), max_bins)`` as they are computed: the same parameters
    (``with_num_heads(1)`` shares them) seen as h heads and as one.
    """
    module = seeded_layer(d_model, num_heads, seed)
    x = embed(tokens, d_model, seed)
    edges = bin_edges(len(tokens), max_bins)
    views = [
        AttentionView(f"{num_heads} heads", binned_weights(module, x, edges)[None]),
        AttentionView(
            "1 head, same weights", binned_weights(module.with_num_heads(1), x, edges)[None]
        ),
    ]
    return TextAttention(list(tokens), views, len(tokens))


def _token_vector(token: str, d_model: int, seed: int) -> torch.Tensor:
    # sha256, not hash(): Python salts str hashes per process and the page must be reproducible.
    digest = int.from_bytes(hashlib.sha256(token.encode("utf-8")).digest()[:8], "little") >> 1
    gen = torch.Generator().manual_seed((digest + seed) % (2**63))
    return torch.randn(d_model, generator=gen)


def _positions(n: int, d_model: int) -> torch.Tensor:
    """Sinusoidal position codes (Vaswani et al.): (n, d_model)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float32)
    angle = pos / 10000 ** (i / d_model)
    pe = torch.zeros(n, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe

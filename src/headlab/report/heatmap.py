"""Heatmap data for the page: per-head attention weights, binned past a few hundred tokens.

The page draws each head on a canvas from a compact encoding: weights binned to at most
``max_bins`` x ``max_bins`` cells, quantised to uint16 per head (scale = the head's largest cell),
base64. Binning averages over the query positions of a bin and sums over the key positions, so
a binned row is still the attention mass a query of that bin puts on a range of keys (rows keep
summing to 1). Tokens stay whole so that hovering can name the tokens a cell covers.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from headlab.attention.module import MultiHeadAttention

MAX_BINS = 256


@dataclass(frozen=True)
class HeatmapView:
    """One way of computing the weights: e.g. "8 heads" or "1 head (same weights)".

    weights: (layer, head, q_pos, k_pos) float array.
    """

    name: str
    weights: np.ndarray


def bin_edges(n: int, max_bins: int = MAX_BINS) -> np.ndarray:
    """Start index of each bin and n at the end: (bins + 1,) ints; one token a bin if n fits."""
    if n <= 0:
        raise ValueError(f"need at least one token, got {n}")
    bins = min(n, max_bins)
    return np.floor(np.arange(bins + 1) * n / bins).astype(np.int64)


def downsample(weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(..., q_pos, k_pos) -> (..., bins, bins): mean over the query bin, sum over the key bin."""
    starts = edges[:-1]
    counts = np.diff(edges)
    summed = np.add.reduceat(np.add.reduceat(weights, starts, axis=-1), starts, axis=-2)
    return summed / counts[:, None]


def _encode(matrix: np.ndarray) -> dict[str, object]:
    """(bins, bins) -> {scale, data}: uint16 little-endian, base64; weight = q * scale / 65535."""
    scale = float(matrix.max()) if matrix.size else 0.0
    quantised = np.zeros(matrix.shape, dtype="<u2")
    if scale > 0:
        quantised = np.rint(matrix / scale * 65535).astype("<u2")
    return {"scale": scale, "data": base64.b64encode(quantised.tobytes()).decode("ascii")}


def heatmap_data(
    title: str,
    tokens: list[str],
    views: list[HeatmapView],
    *,
    note: str = "",
    max_bins: int = MAX_BINS,
) -> dict[str, object]:
    """Plain data for one heatmap explorer on the page.

    tokens: the q_pos = k_pos labels (self-attention). Each view's weights must be
    (layer, head, len(tokens), len(tokens)), or already binned to ``bin_edges(len(tokens),
    max_bins)``: (layer, head, bins, bins); ValueError otherwise.
    """
    n = len(tokens)
    edges = bin_edges(n, max_bins)
    bins = len(edges) - 1
    out_views = []
    for view in views:
        w = np.asarray(view.weights)
        if w.ndim != 4 or w.shape[2:] not in ((n, n), (bins, bins)):
            raise ValueError(
                f"view {view.name!r}: weights must be (layer, head, {n}, {n}) or binned "
                f"(layer, head, {bins}, {bins}), got {w.shape}"
            )
        binned = w if w.shape[2:] == (bins, bins) else downsample(w.astype(np.float64), edges)
        out_views.append(
            {
                "name": view.name,
                "layers": [[_encode(head) for head in layer] for layer in binned],
            }
        )
    return {
        "title": title,
        "note": note,
        "tokens": list(tokens),
        "edges": edges.tolist(),
        "bins": len(edges) - 1,
        "views": out_views,
    }


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


def synthetic_views(
    tokens: list[str],
    *,
    d_model: int = 64,
    num_heads: int = 8,
    seed: int = 0,
    max_bins: int = MAX_BINS,
) -> list[HeatmapView]:
    """``tokens`` embedded by ``embed`` through ``seeded_layer`` and its one-head view.

    Returns views "<h> heads" (1, h, bins, bins) and "1 head, same weights" (1, 1, bins, bins),
    binned to ``bin_edges(len(tokens), max_bins)`` as they are computed: the same parameters
    (``with_num_heads(1)`` shares them) seen as h heads and as one.
    """
    module = seeded_layer(d_model, num_heads, seed)
    x = embed(tokens, d_model, seed)
    edges = bin_edges(len(tokens), max_bins)
    return [
        HeatmapView(f"{num_heads} heads", binned_weights(module, x, edges)[None]),
        HeatmapView(
            "1 head, same weights", binned_weights(module.with_num_heads(1), x, edges)[None]
        ),
    ]


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

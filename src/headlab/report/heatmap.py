"""Heatmap data for the page: per-head attention weights, binned past a few hundred tokens.

The page draws each head on a canvas from a compact encoding: weights binned to at most
``max_bins`` x ``max_bins`` cells (``headlab.analysis.binning``), quantised to uint16 per head
(scale = the head's largest cell), base64. Tokens stay whole so that hovering can name the tokens
a cell covers. Every head's cells travel inside the page: ``bins_within`` gives the most bins an
explorer may have so that they stay within ``PAGE_BYTES`` (a model with hundreds of heads is
binned coarser, and the report says so).
"""

from __future__ import annotations

import base64
import math

import numpy as np

from headlab.analysis.binning import MAX_BINS, bin_edges, downsample
from headlab.analysis.text_attention import AttentionView

#: The most bytes one explorer's weights may take in the page (SmolLM2's 270 heads and their 30
#: one-head views at 256 x 256 cells took 49 MB).
PAGE_BYTES = 8 * 2**20


def encoded_bytes(heads: int, bins: int) -> int:
    """Bytes in the page of ``heads`` heads' bins x bins cells: uint16 each, base64."""
    return heads * 4 * math.ceil(bins * bins * 2 / 3)


def bins_within(heads: int, max_bins: int, budget: int | None = None) -> int:
    """The most bins (at most ``max_bins``, at least 1) whose cells, for ``heads`` heads, fit in
    ``budget`` bytes of the page (default ``PAGE_BYTES``)."""
    budget = PAGE_BYTES if budget is None else budget
    bins = min(max_bins, max(1, math.isqrt(budget * 3 // (8 * max(heads, 1)))) + 1)
    while bins > 1 and encoded_bytes(heads, bins) > budget:
        bins -= 1
    return bins


def _encode(matrix: np.ndarray) -> dict[str, object]:
    """(bins, bins) -> {scale, data}: uint16 little-endian, base64; weight = q * scale / 65535."""
    scale = float(matrix.max()) if matrix.size else 0.0
    quantised = np.zeros(matrix.shape, dtype="<u2")
    if scale > 0:
        quantised = np.rint(matrix / scale * 65535).astype("<u2")
    return {"scale": scale, "data": base64.b64encode(quantised.tobytes()).decode("ascii")}


def profile_data(values: np.ndarray) -> list[list[dict[str, object]]]:
    """(layer, head, bins) -> per layer, per head, the bins encoded as ``_encode`` does (a line
    the page draws under an explorer, e.g. the attention each key receives)."""
    return [[_encode(np.asarray(head, dtype=np.float64)) for head in layer] for layer in values]


def heatmap_data(
    title: str,
    tokens: list[str],
    views: list[AttentionView],
    *,
    note: str = "",
    max_bins: int = MAX_BINS,
    total_tokens: int | None = None,
    cut_reason: str = "",
) -> dict[str, object]:
    """Plain data for one heatmap explorer on the page.

    tokens: the q_pos = k_pos labels (self-attention). Each view's weights must be
    (layer, head, len(tokens), len(tokens)), or already binned to ``bin_edges(len(tokens),
    max_bins)``: (layer, head, bins, bins); ValueError otherwise. total_tokens: how many tokens
    the text had before it was cut (the page then says "Cut to N of M tokens: " and
    ``cut_reason``, which limit cut it).
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
        "total_tokens": max(n, total_tokens or n),
        "cut_reason": cut_reason,
        "edges": edges.tolist(),
        "bins": len(edges) - 1,
        "views": out_views,
    }

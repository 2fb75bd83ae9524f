"""Heatmap data for the page: per-head attention weights, token level or binned.

The page draws each head on a canvas from a compact encoding. Token level (``heatmap_data(...,
token_level=True)``, the report's model explorer): one cell a token, 8 bits a cell, the causal
triangle, deflated (``headlab.results.token_cells``). Binned: weights binned to at most
``max_bins`` x ``max_bins`` cells (``headlab.results.binning``), quantised to uint16 per head
(scale = the head's largest cell), base64. Tokens stay whole so that hovering can name the tokens a
cell covers. Every head's cells travel inside the page: ``bins_within`` gives the most bins an
explorer may have so that they stay within ``PAGE_BYTES`` (a model with hundreds of heads is binned
coarser, and the report says so).

An explorer is plain data (``heatmap_data``): measured once, it is stored as it is in a results
file (``headlab.results.report_measurements``); ``check_explorer`` reads one back and
``decoded_views`` gives its weights again (to within the uint16 step, scale / 65535).
"""

from __future__ import annotations

import base64
import itertools
import math

import numpy as np

from headlab.results import token_cells
from headlab.results.attention_views import AttentionView
from headlab.results.binning import MAX_BINS, bin_edges, downsample
from headlab.results.schema import Fields, are_short_texts, is_int, is_number, problem

#: The most bytes one explorer's weights may take in the page (SmolLM2's 270 heads and their 30
#: one-head views at 256 x 256 cells took 49 MB).
PAGE_BYTES = 8 * 2**20
#: The ``cells`` of a token-level explorer (binned ones have none: uint16 cells).
TOKEN_CELLS = "uint8-deflate"


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


def heatmap_data(
    title: str,
    tokens: list[str],
    views: list[AttentionView],
    *,
    note: str = "",
    max_bins: int = MAX_BINS,
    total_tokens: int | None = None,
    cut_reason: str = "",
    token_level: bool = False,
) -> dict[str, object]:
    """Plain data for one heatmap explorer on the page.

    tokens: the q_pos = k_pos labels (self-attention). Each view's weights must be
    (layer, head, len(tokens), len(tokens)), or already binned to ``bin_edges(len(tokens),
    max_bins)``: (layer, head, bins, bins); ValueError otherwise. total_tokens: how many tokens
    the text had before it was cut (the page then says "Cut to N of M tokens: " and
    ``cut_reason``, which limit cut it). token_level: one cell a token whatever ``max_bins``,
    each head 8-bit and deflated (``token_cells``; only the causal triangle when every head is
    causal): the explorer then has ``cells`` "uint8-deflate" and ``triangle``.
    """
    n = len(tokens)
    if token_level:
        return _token_level(title, tokens, views, note, total_tokens, cut_reason)
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


def _token_level(title, tokens, views, note, total_tokens, cut_reason) -> dict[str, object]:
    n = len(tokens)
    weights = [np.asarray(view.weights) for view in views]
    for view, w in zip(views, weights, strict=True):
        if w.ndim != 4 or w.shape[2:] != (n, n):
            raise ValueError(
                f"view {view.name!r}: weights must be (layer, head, {n}, {n}), got {w.shape}"
            )
    triangle = all(token_cells.is_causal(w) for w in weights)
    return {
        "title": title,
        "note": note,
        "tokens": list(tokens),
        "total_tokens": max(n, total_tokens or n),
        "cut_reason": cut_reason,
        "edges": list(range(n + 1)),
        "bins": n,
        "cells": TOKEN_CELLS,
        "triangle": triangle,
        "views": [
            {
                "name": view.name,
                "layers": [[token_cells.encode(head, triangle) for head in layer] for layer in w],
            }
            for view, w in zip(views, weights, strict=True)
        ],
    }


def explorer_bytes(explorer: dict) -> int:
    """Bytes of an explorer's cells in the page (their base64 strings)."""
    key = "z" if explorer.get("cells") == TOKEN_CELLS else "data"
    return sum(len(c[key]) for v in explorer["views"] for layer in v["layers"] for c in layer)


def _cell_ok(cell: object) -> bool:
    return (
        isinstance(cell, dict)
        and is_number(cell.get("scale"))
        and cell["scale"] >= 0
        and isinstance(cell.get("data"), str)
    )


def _token_cell_ok(cell: object, n: int, triangle: bool) -> bool:
    return (
        isinstance(cell, dict)
        and is_number(cell.get("scale"))
        and cell["scale"] >= 0
        and isinstance(cell.get("z"), str)
        and token_cells.levels_of(cell, n, triangle) is not None
    )


def _strings(value: object) -> bool:
    return bool(value) and are_short_texts(value)


def check_explorer(f: Fields) -> dict:
    """The explorer at ``f`` (as ``heatmap_data`` gives it); ValueError naming the field that
    does not fit: tokens, edges that cover them, and every head's cells as {scale, data} of
    bins x bins uint16 values."""
    tokens = f.get("tokens", "a non-empty list of strings", _strings)
    bins = f.int("bins", 1, len(tokens))

    def ok_edges(v: object) -> bool:
        return (
            isinstance(v, list)
            and len(v) == bins + 1
            and all(map(is_int, v))
            and v[0] == 0
            and v[-1] == len(tokens)
            and all(a < b for a, b in itertools.pairwise(v))
        )

    f.get("edges", f"{bins + 1} increasing positions from 0 to {len(tokens)}", ok_edges)
    for key in ("title", "note", "cut_reason"):
        f.str(key)
    f.int("total_tokens", len(tokens))
    token_level = f.data.get("cells", "uint16") == TOKEN_CELLS
    if token_level:
        triangle = f.get("triangle", "true or false", lambda v: isinstance(v, bool))
        f.get("edges", f"one cell a token: 0..{len(tokens)}", lambda v: v == list(range(bins + 1)))
    elif "cells" in f.data:
        f.get("cells", f"{TOKEN_CELLS!r} or none (uint16 cells)", lambda v: False)
    size = len(base64.b64encode(bytes(2 * bins * bins)))
    for view in f.objects("views", nonempty=True):
        view.str("name")
        for j, layer in enumerate(view.list("layers", nonempty=True)):
            where = f"{view.at('layers')}[{j}]"
            if not isinstance(layer, list) or not layer:
                raise problem(where, "a non-empty list of heads", layer)
            for h, cell in enumerate(layer):
                if token_level:
                    if not _token_cell_ok(cell, bins, triangle):
                        expected = f"{{scale, z}} of {bins} x {bins} deflated uint8 levels"
                        raise problem(f"{where}[{h}]", expected, cell)
                elif not _cell_ok(cell) or len(cell["data"]) != size:
                    expected = f"{{scale, data}} of {bins} x {bins} uint16 values (base64)"
                    raise problem(f"{where}[{h}]", expected, cell)
    return f.data


def _decode(cell: dict, bins: int) -> np.ndarray:
    """{scale, data} -> (bins, bins) float64, the inverse of ``_encode`` (to its uint16 step)."""
    quantised = np.frombuffer(base64.b64decode(cell["data"]), dtype="<u2")
    return quantised.reshape(bins, bins).astype(np.float64) * (cell["scale"] / 65535)


def decoded_views(explorer: dict) -> list[AttentionView]:
    """An explorer's views as AttentionViews of (layer, head, bins, bins) weights."""
    bins = explorer["bins"]

    def decode(cell: dict) -> np.ndarray:
        if explorer.get("cells") == TOKEN_CELLS:
            return token_cells.decode(cell, bins, explorer["triangle"])
        return _decode(cell, bins)

    return [
        AttentionView(
            view["name"],
            np.stack([np.stack([decode(c) for c in layer]) for layer in view["layers"]]),
        )
        for view in explorer["views"]
    ]

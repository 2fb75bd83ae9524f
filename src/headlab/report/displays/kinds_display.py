"""Displays of the encoder-decoders' and image models' heads: every head's statistics on a
layers x heads grid, and the pattern behind one head.

- ``cross_display``: an encoder-decoder's three attention kinds (encoder, decoder, cross), and
  one cross-attention head's (target token, source position) weights on one pair: for Whisper,
  target tokens against 20 ms audio positions, where an alignment head draws the speech's path.
- ``patch_grid_display``: an image model's heads, and one head's weight from the class token on
  each patch, laid out on the 2-D patch grid, the layer's high-norm patches outlined and the
  registers' weight beside it.

Weights travel as float32 base64 (``encode_floats``); every text (tokens, labels, the model's
name) is data, written by the drawers with ``textContent``.
"""

from __future__ import annotations

import numpy as np

from headlab.report.displays.display_bundle import Display
from headlab.results.head_pattern_result import encode_floats
from headlab.results.stream_heads import EncoderDecoderHeads, VisionHeads


def cross_display(result: EncoderDecoderHeads, *, metric: str | None = None) -> Display:
    """Every attention kind's statistics and the kept cross-attention patterns; ``metric`` is
    shown first (default: max_weight). ValueError for a metric no kind has."""
    names = sorted({m for stats in result.kinds.values() for m in stats.metrics})
    metric = metric or ("max_weight" if "max_weight" in names else names[0])
    if metric not in names:
        raise ValueError(f"metric must be one of {', '.join(names)}, got {metric!r}")
    kinds = {
        kind: {
            "num_layers": s.num_layers,
            "num_heads": s.num_heads,
            "metrics": s.metrics,
            "notes": s.notes,
        }
        for kind, s in result.kinds.items()
    }
    data = {
        "model": result.model,
        "n_sources": result.n_sources,
        "kinds": kinds,
        "first_kind": "cross" if "cross" in kinds else next(iter(kinds)),
        "metric": metric,
        "patterns": None,
    }
    kept = result.cross_patterns
    if kept is not None:
        data["patterns"] = {
            "heads": [list(h) for h in kept.heads],
            "targets": kept.targets,
            "sources": kept.sources,
            "notes": kept.notes,
            "weights": encode_floats(np.asarray(kept.weights, dtype=np.float32)),
        }
    summary = (
        f"EncoderDecoderHeads({result.model}, {result.n_sources} sources, "
        f"{', '.join(result.kinds)})"
    )
    return Display("cross", data, summary, "display-cross")


def patch_grid_display(result: VisionHeads, *, metric: str | None = None) -> Display:
    """Every head's statistics over patches and each head's class-token row on the patch grid
    (files without those rows: the statistics alone). ValueError for an unknown metric."""
    metric = metric or "cls"
    if metric not in result.metrics:
        raise ValueError(f"metric must be one of {', '.join(result.metrics)}, got {metric!r}")
    data = {
        "model": result.model,
        "n_images": result.n_images,
        "num_layers": result.num_layers,
        "num_heads": result.num_heads,
        "grid": result.grid,
        "registers": result.registers,
        "threshold": result.threshold,
        "metrics": result.metrics,
        "metric": metric,
        "notes": result.notes,
        "cls": None,
        "tokens": 0,
        "ratios": None,
    }
    if result.cls_attention:
        rows = np.asarray(result.cls_attention, dtype=np.float32)  # (layer, head, k_pos)
        data["cls"], data["tokens"] = encode_floats(rows), int(rows.shape[-1])
        if result.norm_ratios and len(result.norm_ratios[0][0]) == rows.shape[-1]:
            data["ratios"] = encode_floats(np.asarray(result.norm_ratios[0], dtype=np.float32))
    rows, cols = result.grid
    summary = (
        f"VisionHeads({result.model}, {result.n_images} images, {result.num_layers} x "
        f"{result.num_heads} heads, {rows} x {cols} patches)"
    )
    return Display("patch-grid", data, summary, "display-patch-grid")

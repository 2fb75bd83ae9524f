"""Results of the new kinds to display, built through the results' own classes: an
encoder-decoder's three attention kinds with one cross head's synthetic alignment (a diagonal
path through 53 source positions), and an image model on a 5 x 7 patch grid with 2 registers
and one high-norm patch. Tokens and names carry markup that must stay text."""

from __future__ import annotations

import numpy as np
from display_samples import XSS

from headlab.results.head_statistics import HeadStatistics
from headlab.results.kind_views import CrossPatterns
from headlab.results.stream_heads import EncoderDecoderHeads, VisionHeads

TARGET, SOURCE = 11, 53  # target tokens x source positions
ROWS, COLS, REGISTERS = 5, 7, 2
HIGH = (2, 3)  # (row, col) of the high-norm patch


def alignment(target: int = TARGET, source: int = SOURCE) -> np.ndarray:
    """(target, source) rows summing to one, peaked on a diagonal: token t on position 5t."""
    s = np.arange(source)[None, :]
    peak = 5 * np.arange(target)[:, None]
    w = np.exp(-0.5 * ((s - peak) / 1.5) ** 2) + 1e-3
    return w / w.sum(-1, keepdims=True)


def encoder_decoder_heads(layers: int = 3, heads: int = 4) -> EncoderDecoderHeads:
    rng = np.random.default_rng(1)

    def stats(names):
        metrics = {n: rng.random((layers, heads)).round(4).tolist() for n in names}
        return HeadStatistics(f"fixture {XSS}", 2, layers, heads, metrics)

    kinds = {
        "encoder": stats(("entropy", "max_weight", "self")),
        "decoder": stats(("entropy", "max_weight", "prev")),
        "cross": stats(("entropy", "max_weight", "first")),
    }
    targets = ["<s>", XSS, *[f"tok{i}" for i in range(TARGET - 2)]]
    sources = [f"{0.02 * i:.2f}s" for i in range(SOURCE)]
    sources[1] = XSS
    diagonal = alignment()
    flat = np.full((TARGET, SOURCE), 1.0 / SOURCE)
    weights = [diagonal.tolist(), flat.tolist()]
    kept = CrossPatterns([(1, 2), (2, 0)], targets, sources, weights, ["2 of 12 heads kept (test)"])
    return EncoderDecoderHeads(f"fixture {XSS}", 2, kinds, kept)


def cls_rows(layers: int, heads: int) -> np.ndarray:
    """(layer, head, k_pos) class-token rows: head 0 of every layer peaks on the HIGH patch."""
    tokens = 1 + REGISTERS + ROWS * COLS
    rng = np.random.default_rng(2)
    w = rng.random((layers, heads, tokens)) + 0.1
    w[:, 0, 1 + REGISTERS + HIGH[0] * COLS + HIGH[1]] = 40.0
    return w / w.sum(-1, keepdims=True)


def vision_heads(layers: int = 3, heads: int = 4) -> VisionHeads:
    rng = np.random.default_rng(3)
    names = ("entropy", "max_weight", "cls", "registers", "high_norm", "patch_distance")
    metrics = {n: rng.random((layers, heads)).round(4).tolist() for n in names}
    tokens = 1 + REGISTERS + ROWS * COLS
    ratios = np.ones((1, layers + 1, tokens))
    ratios[0, 1:, 1 + REGISTERS + HIGH[0] * COLS + HIGH[1]] = 9.0  # high-norm from layer 1 on
    return VisionHeads(
        f"fixture {XSS}",
        1,
        layers,
        heads,
        [ROWS, COLS],
        list(range(1, 1 + REGISTERS)),
        4.0,
        metrics,
        ratios.tolist(),
        [],
        cls_rows(layers, heads).tolist(),
    )

"""Results to display, built through the results' own classes: head statistics of prime sizes,
a head's pattern on a long synthetic text (local, sink and induction weights), SmolLM2's
whole circuits graph (30 layers of 9 query heads on 3 K/V groups: 70,651 edges), and a score
split whose parts sum as the split's do."""

from __future__ import annotations

import numpy as np

from headlab.heads.one_head_pattern import tiles_within
from headlab.results.circuit_edges import EdgeScores, FaithfulnessCurve
from headlab.results.circuit_run import CircuitRun
from headlab.results.circuit_tasks import TaskPerformance
from headlab.results.head_pattern_result import (
    OVERVIEW_CELLS,
    TILE,
    TILE_BUDGET,
    HeadPattern,
    encode_floats,
)
from headlab.results.head_statistics import HeadStatistics
from headlab.results.score_split_result import PairSplit, ScoreSplitResult, SourceSplit

XSS = "<img src=x onerror=alert(1)>"


def head_statistics(layers: int = 5, heads: int = 7, seed: int = 0) -> HeadStatistics:
    rng = np.random.default_rng(seed)
    names = ("entropy", "max_weight", "self", "prev", "distance")
    metrics = {n: rng.random((layers, heads)).round(4).tolist() for n in names}
    detectors = {"induction": rng.random((layers, heads)).round(4).tolist()}
    return HeadStatistics(f"fixture {XSS}", 3, layers, heads, metrics, detectors)


def synthetic_weights(n: int, seed: int = 0) -> np.ndarray:
    """(q_pos, k_pos) causal weights: a sink, a local band and an induction stripe (the second
    half of the text repeats the first), rows summing to one."""
    rng = np.random.default_rng(seed)
    w = np.zeros((n, n), dtype=np.float32)
    q = np.arange(n)
    w[:, 0] = 3.0
    for lag in range(4):
        w[q[lag:], q[lag:] - lag] += 2.0 / (lag + 1)
    half = n // 2
    w[q[half:], q[half:] - half + 1] += 6.0
    w += np.tril(rng.random((n, n), dtype=np.float32) * 0.02)
    w = np.tril(w)
    return w / w.sum(1, keepdims=True)


def block_means(weights: np.ndarray, cell: int) -> np.ndarray:
    n = weights.shape[0]
    cells = -(-n // cell)
    padded = np.zeros((cells * cell, cells * cell), dtype=np.float64)
    padded[:n, :n] = weights
    per_key = padded.reshape(cells * cell, cells, cell).sum(2)  # (q_pos, k_cell)
    rows = np.minimum(cell, n - np.arange(cells) * cell)
    return per_key.reshape(cells, cell, cells).sum(1) / rows[:, None]


def head_pattern(
    n: int = 1000, *, budget: int = TILE_BUDGET, tokens: list[str] | None = None
) -> HeadPattern:
    weights = synthetic_weights(n)
    cell = -(-n // OVERVIEW_CELLS)
    tiles, floor, mass, causal = tiles_within(weights, budget, TILE)
    words = tokens or [XSS if i == 7 else f" w{(i * 7) % 251}" for i in range(n)]
    return HeadPattern(
        "fixture",
        3,
        5,
        words,
        cell,
        encode_floats(block_means(weights, cell)),
        TILE,
        tiles,
        budget,
        mass,
        n,
        "",
        floor,
        causal,
    )


def smollm2_edges(layers: int = 30, heads: int = 9, kv: int = 3) -> list[str]:
    """Every edge of SmolLM2's circuits graph: into each layer's q of each head, k and v of each
    K/V group from every earlier node; into its MLP also from its own heads; into the logits."""
    edges = []
    senders = ["embed"]
    for layer in range(layers):
        inputs = [f"{layer}.{h}<q>" for h in range(heads)]
        inputs += [f"{layer}.g{g}<{x}>" for g in range(kv) for x in "kv"]
        edges += [f"{s}->{i}" for i in inputs for s in senders]
        own = [f"{layer}.{h}" for h in range(heads)]
        edges += [f"{s}->mlp.{layer}" for s in senders + own]
        senders = senders + own + [f"mlp.{layer}"]
    return edges + [f"{s}->logits" for s in senders]


def circuit_run(
    edges: list[str] | None = None,
    seed: int = 0,
    *,
    layers: int = 30,
    heads: int = 9,
    kv: int = 3,
    top: int = 40,
) -> CircuitRun:
    edges = edges or smollm2_edges(layers, heads, kv)
    rng = np.random.default_rng(seed)
    scores = (rng.standard_normal(len(edges)) * rng.pareto(2.0, len(edges)) * 1e-3).tolist()
    performance = TaskPerformance("induction", "logprob", 8, -1.0, -6.0, 0.9, True)
    fractions = [0.001, 0.01, 0.05, 0.1, 0.5, 1.0]
    sizes = [max(1, round(f * len(edges))) for f in fractions]
    curve = FaithfulnessCurve(
        "eap-ig",
        "top",
        "logprob",
        len(edges),
        fractions,
        sizes,
        [0.2, 0.55, 0.8, 0.9, 0.97, 1.0],
        [[0.0, 0.02], [0.05, 0.01], [0.1, 0.12], [0.2, 0.25], [0.6, 0.55], [1.0, 1.0]],
        0.8,
        0.2,
        [0.3, 0.31],
        [0.7, 0.69],
    )
    scored = EdgeScores("eap-ig", "logprob", edges, scores, -1.0, -6.0)
    return CircuitRun(
        "SmolLM2-135M",
        "induction",
        "eap-ig",
        5,
        min(top, len(edges)),
        performance,
        [heads] * layers,
        [kv] * layers,
        scored,
        curve,
    )


SPLIT_COMPONENTS = ["embed", "0.0", "0.1", "0.2", "mlp.0", "1.0", "1.1", "1.2", "mlp.1", "qk-bias"]


def score_split_result(seed: int = 0, n: int = 61) -> ScoreSplitResult:
    """Three (query, key) pairs on a text of ``n`` tokens (one of them ``XSS``): marginals and
    pair matrices that sum to q.k, head 1.1's key side split by the source tokens it read."""
    rng = np.random.default_rng(seed)
    words = [XSS if i == 5 else f" v{(i * 11) % 89}" for i in range(n)]
    pairs = []
    for query, key in ((n - 1, 31), (n - 2, 7), (40, 40)):
        key_side = rng.standard_normal(len(SPLIT_COMPONENTS)).round(3)
        raw = float(key_side.sum())
        query_side = rng.standard_normal(len(SPLIT_COMPONENTS)).round(3)
        query_side[-1] += raw - query_side.sum()
        pair = rng.standard_normal((4, 4)).round(3)
        pair[-1, -1] += raw - pair.sum()
        reads = rng.standard_normal(key + 1).round(3)
        reads[key] += key_side[6] - reads.sum()  # they sum to head 1.1's key-side term
        pairs.append(
            PairSplit(
                0,
                query,
                key,
                raw + 0.5,
                raw,
                0.0,
                0.5,
                query_side.tolist(),
                key_side.tolist(),
                ["embed", "0.1", "mlp.0", "rest"],
                ["1.1", "embed", "0.2", "rest"],
                pair.tolist(),
                [
                    SourceSplit("1.1", list(range(key + 1)), reads.tolist()),
                    SourceSplit("0.2", [0, key], [0.25, -0.5]),
                ],
            )
        )
    return ScoreSplitResult(
        f"fixture {XSS}", 2, 1, 0, "top-3", [words], SPLIT_COMPONENTS, 0.125, None, pairs
    )


def image_split_result(seed: int = 1, rows: int = 3, cols: int = 4) -> ScoreSplitResult:
    """A score split on an image of ``rows`` x ``cols`` patches after its class token and 4
    registers: the text's sample with the image's positions and patch grid."""
    first = 5
    tokens = ["cls"] + [f"register {r}" for r in range(4)]
    tokens += [f"patch {r},{c}" for r in range(rows) for c in range(cols)]
    rng = np.random.default_rng(seed)
    key_side = rng.standard_normal(len(SPLIT_COMPONENTS)).round(3)
    raw = float(key_side.sum())
    pair = rng.standard_normal((2, 2)).round(3)
    pair[-1, -1] += raw - pair.sum()
    reads = rng.standard_normal(len(tokens)).round(3)
    reads[-1] += key_side[6] - reads.sum()  # every position is a source: sums to 1.1's term
    split = PairSplit(
        0,
        0,
        first + 6,
        raw,
        raw,
        0.0,
        0.0,
        key_side.tolist(),
        key_side.tolist(),
        ["embed", "rest"],
        ["1.1", "rest"],
        pair.tolist(),
        [SourceSplit("1.1", list(range(len(tokens))), reads.tolist())],
    )
    return ScoreSplitResult(
        "tiny-dinov2",
        2,
        1,
        1,
        "patch-6",
        [tokens],
        SPLIT_COMPONENTS,
        0.125,
        None,
        [split],
        grid=(rows, cols),
        first_patch=first,
    )

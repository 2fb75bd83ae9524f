"""The checks and fits of bench_three_ways.py: agreement between the tools, the quadratic fits of
the eager tools' memory and time, and the arithmetic of what eager attention holds.

Rows are the dicts a child of bench_three_ways.py prints: tool, length, seconds, cpu_seconds,
before, peak (bytes), first and induction ((layer, head) lists).
"""

from __future__ import annotations

import torch

from long_context_routes import SMOLLM2

LAYERS, HEADS = SMOLLM2["num_hidden_layers"], SMOLLM2["num_attention_heads"]
FLOAT = 4  # bytes of a float32


def eager_bytes(length: int, arrays: float = 2.0) -> int:
    """What transformers' eager attention holds for one layer at ``length`` tokens: ``arrays``
    float32 (head, T, T) arrays (each step, scaled scores -> masked scores -> softmax, makes a new
    one while the last is alive) and the (T, T) float mask."""
    return int(arrays * HEADS * length**2 * FLOAT + length**2 * FLOAT)


def eager_estimate(length: int) -> int:
    """The extra memory an eager tool is expected to take at ``length`` tokens, to decide
    whether to start it: 3 (head, T, T) arrays (2 in the attention, 1 more kept by nnsight's
    trace, as measured), the mask and the float32 logits."""
    return eager_bytes(length, arrays=3.0) + length * SMOLLM2["vocab_size"] * FLOAT


def full_cache_bytes(length: int) -> int:
    """Every layer's float32 weights kept at once: layers x heads x T^2 x 4 bytes."""
    return LAYERS * HEADS * length**2 * FLOAT


def fit_quadratic(lengths: list[int], values: list[float]) -> tuple[float, float, float]:
    """(a, b, c) of the least-squares a + b T + c T^2 through (lengths, values); needs 3."""
    import numpy as np

    if len(set(lengths)) < 3:
        raise ValueError(f"a quadratic fit needs 3 distinct lengths, got {sorted(set(lengths))}")
    c, b, a = np.polyfit(np.asarray(lengths, float), np.asarray(values, float), 2)
    return float(a), float(b), float(c)


def disagreements(rows: list[dict], tolerance: float) -> list[str]:
    """One line per length where several tools ran: the largest difference of each score from
    headlab's (or the first tool's), and whether it is within ``tolerance``."""
    lines = []
    for length in sorted({r["length"] for r in rows}):
        here = [r for r in rows if r["length"] == length]
        if len(here) < 2:
            continue
        ref = next((r for r in here if r["tool"] == "headlab"), here[0])
        for row in here:
            if row is ref:
                continue
            worst = {
                name: (torch.tensor(row[name]) - torch.tensor(ref[name])).abs().max().item()
                for name in ("first", "induction")
            }
            ok = max(worst.values()) <= tolerance
            lines.append(
                f"{length}: {row['tool']} - {ref['tool']}: max |first| {worst['first']:.1e}, "
                f"max |induction| {worst['induction']:.1e}: "
                + ("agree" if ok else f"DISAGREE (tolerance {tolerance:g})")
            )
    return lines


def through_two(lengths: list[int], values: list[float]) -> tuple[float, float]:
    """(b, c) of b T + c T^2 through the two longest (length, value) points: no constant, so the
    short lengths, where the allocator's noise is as large as the weights, do not count."""
    (t1, v1), (t2, v2) = sorted(zip(lengths, values, strict=True))[-2:]
    c = (v2 / t2 - v1 / t1) / (t2 - t1)
    return v1 / t1 - c * t1, c


def extrapolation(rows: list[dict], tool: str, target: int) -> list[str]:
    """The fits of ``tool``'s extra memory and time, and their values at ``target``."""
    mine = sorted((r for r in rows if r["tool"] == tool), key=lambda r: r["length"])
    if len({r["length"] for r in mine}) < 3:
        return [f"{tool}: {len(mine)} measured length(s), a fit needs 3"]
    lengths = [r["length"] for r in mine]
    extra = [r["peak"] - r["before"] for r in mine]
    a, b, c = fit_quadratic(lengths, extra)
    residuals = ", ".join(
        f"{(v - a - b * t - c * t**2) / 2**20:+.0f}" for t, v in zip(lengths, extra, strict=True)
    )
    b2, c2 = through_two(lengths, extra)
    clock = "cpu_seconds" if all("cpu_seconds" in r for r in mine) else "seconds"
    ta, tb, tc = fit_quadratic(lengths, [r[clock] for r in mine])
    return [
        f"{tool}: extra memory(T) = {a / 2**20:.0f} MiB {b / 2**10:+.2f} KiB x T {c:+.1f} B x "
        f"T^2, least squares over T = {', '.join(map(str, lengths))} (residuals {residuals} "
        f"MiB); the T^2 term is {c / (HEADS * FLOAT):.2f} x {HEADS} heads x 4 B: that many "
        "(head, T, T) float32 arrays alive at once",
        f"{tool}: through the two longest alone: {b2 / 2**10:.2f} KiB x T {c2:+.1f} B x T^2 "
        f"({c2 / (HEADS * FLOAT):.2f} arrays)",
        f"{tool}: at {target}: {(a + b * target + c * target**2) / 2**30:.1f} GiB above the "
        f"model by the fit, {(b2 * target + c2 * target**2) / 2**30:.1f} GiB by the two "
        f"longest; {clock.replace('_', ' ')} {ta + tb * target + tc * target**2:.0f} s (fit "
        f"{ta:.3g} {tb:+.3g} T {tc:+.3g} T^2)",
    ]


def cache_check(rows: list[dict]) -> list[str]:
    """tl-cache's measured extra memory beside every layer's weights at its lengths."""
    return [
        f"tl-cache at {r['length']}: extra {(r['peak'] - r['before']) / 2**30:.2f} GiB; every "
        f"layer's weights {LAYERS} x {HEADS} x {r['length']}^2 x 4 B = "
        f"{full_cache_bytes(r['length']) / 2**30:.2f} GiB"
        for r in rows
        if r["tool"] == "tl-cache"
    ]


def arithmetic(target: int) -> list[str]:
    one = HEADS * target**2 * FLOAT
    return [
        f"one layer's weights at {target}: {HEADS} x {target}^2 x 4 B = {one / 1e9:.2f} GB; eager "
        f"attention makes 2 of them at once, plus the mask: {eager_bytes(target) / 1e9:.1f} GB",
        f"every layer's weights (a full cache): {LAYERS} x {HEADS} x {target}^2 x 4 B = "
        f"{full_cache_bytes(target) / 1e9:.1f} GB ({full_cache_bytes(target) / 2**30:.1f} GiB)",
    ]


def top_heads(row: dict, name: str, count: int = 3) -> str:
    cells = [(v, layer, h) for layer, values in enumerate(row[name]) for h, v in enumerate(values)]
    best = sorted(cells, reverse=True)[:count]
    return ", ".join(f"{layer}.{h} {v:.2f}" for v, layer, h in best)


def ratios(rows: list[dict], tool: str = "transformer_lens") -> list[str]:
    """headlab's time over ``tool``'s at each length where both ran (wall and CPU seconds)."""
    lines = []
    for length in sorted({r["length"] for r in rows}):
        ours = [r for r in rows if r["length"] == length and r["tool"] == "headlab"]
        theirs = [r for r in rows if r["length"] == length and r["tool"] == tool]
        if ours and theirs:
            a, b = ours[0], theirs[0]
            cpu = (
                f", CPU {a['cpu_seconds'] / b['cpu_seconds']:.2f}x"
                if "cpu_seconds" in a and "cpu_seconds" in b
                else ""
            )
            memory = (a["peak"] - a["before"]) / max(1, b["peak"] - b["before"])
            lines.append(
                f"{length}: headlab / {tool}: time {a['seconds'] / b['seconds']:.2f}x"
                f"{cpu}, extra memory {memory:.2f}x"
            )
    return lines

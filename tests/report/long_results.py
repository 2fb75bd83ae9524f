"""Synthetic long-context and KV-budget results at SmolLM2's size (30 layers x 9 heads, 3 K/V
groups a layer, 8192 tokens), built through the results' own classes so that they follow the
documented schemas; seeded, with a few retrieval heads, sinks and local heads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from headlab.heads.attention_maps import attention_maps, block_size
from headlab.heads.long_context import long_context_findings
from headlab.heads.roles import head_roles
from headlab.results.head_statistics import HeadStatistics
from headlab.results.kv_budget_result import KVBudgetResult, PlanRun, RetrievalCheck
from headlab.results.long_context_result import HeavyHitters, LongContextResult, TextContext

LAYERS, HEADS, KV, N_TOKENS = 30, 9, 3, 8192
NAMES = ("entropy", "max_weight", "first", "self", "prev", "distance", "contribution_norm")


def long_context_result(
    seed: int = 3, *, model: str = "SmolLM2-135M", retrieval: bool = True, block: int | None = None
) -> LongContextResult:
    """30 x 9 heads on one text of 8192 tokens. ``retrieval``: a few heads above Wu et al.'s
    threshold (else every retrieval score is 0). ``block``: positions per block of the maps
    (default: ``block_size(8192)``, as a pass gives)."""
    rng = np.random.default_rng(seed)
    shape = (LAYERS, HEADS)
    first = rng.beta(0.6, 0.8, shape)
    metrics = {name: rng.random(shape).tolist() for name in NAMES}
    metrics["first"] = first.tolist()
    metrics["distance"] = (rng.random(shape) * 3000).tolist()
    statistics = HeadStatistics(model, 1, LAYERS, HEADS, metrics)
    window_error = rng.beta(0.5, 3.0, shape)
    hits = np.zeros(shape, dtype=int)
    if retrieval:
        for layer, head in ((14, 2), (17, 6), (21, 0), (9, 4)):
            hits[layer, head] = rng.integers(10, 60)
    roles = head_roles(
        sinks=4,
        window=256,
        first=first.tolist(),
        window_error=window_error.tolist(),
        copy_weight=(rng.random(shape) * 0.4).tolist(),
        retrieval_hits=hits.tolist(),
        copies=83,
        kv_heads_per_layer=[KV] * LAYERS,
        no_window="",
    )
    size = block or block_size(N_TOKENS)
    blocks = -(-N_TOKENS // size)
    mass = torch.tensor(rng.random((LAYERS, HEADS, blocks, blocks))).tril()
    mass[..., 0] += torch.tensor(first)[..., None] * blocks  # the sink block
    rows = torch.full((blocks,), float(size))
    sums = mass / mass.sum(-1, keepdim=True) * rows[:, None]
    received = torch.tensor(rng.gamma(0.3, 1.0, (LAYERS, HEADS, N_TOKENS)))
    received[..., 0] += torch.tensor(first) * N_TOKENS
    maps = attention_maps(sums, rows, received, size)
    share = torch.tensor(rng.random(shape) * 0.2)
    top = rng.integers(1, N_TOKENS, (LAYERS, HEADS, 5)).tolist()
    heavy = HeavyHitters(share.tolist(), top, [0])
    findings = long_context_findings(statistics, share)
    context = TextContext(N_TOKENS, N_TOKENS, False)
    return LongContextResult(statistics, context, heavy, findings, roles, maps)


def kv_budget_result(seed: int = 3, model: str = "SmolLM2-135M") -> KVBudgetResult:
    """Full model, four plan sizes (one asked as 1.67x of KV memory), 3 random seeds each, the
    opposite ranking and the retrieval check."""
    rng = np.random.default_rng(seed)
    every = [[layer, g] for layer in range(LAYERS) for g in range(KV)]
    ranking = sorted(
        ([layer, g, float(rng.beta(0.5, 3))] for layer, g in every), key=lambda c: c[2]
    )
    runs = [PlanRun("full", 0.0, None, [], 1.0, 20.0, 0.95)]
    for count, target in ((27, None), (38, 1.67), (45, None), (54, None)):
        share = count / len(every)
        saved = 1 / (1 - share * (1 - 260 / N_TOKENS))
        groups = [c[:2] for c in ranking[:count]]
        runs.append(
            PlanRun(
                "chosen",
                share,
                None,
                groups,
                saved,
                20.0 * (1 + share / 30),
                0.95 - share / 10,
                target,
            )
        )
        for s in range(3):
            picked = [every[i] for i in rng.choice(len(every), count, replace=False)]
            runs.append(
                PlanRun(
                    "random",
                    share,
                    s,
                    picked,
                    saved,
                    20.0 * (1 + share / 3 + s / 50),
                    0.95 - share + s / 40,
                    target,
                )
            )
        runs.append(
            PlanRun(
                "opposite",
                share,
                None,
                [c[:2] for c in ranking[::-1][:count]],
                saved,
                20.0 * (1 + share),
                0.3,
                target,
            )
        )
    check = RetrievalCheck(
        4,
        [[14, 2], [17, 6], [21, 0], [9, 4]],
        0.2,
        [0.93, 0.94, 0.95],
        [[[1, 1], [2, 2], [3, 3], [4, 4]]] * 3,
    )
    texts = "built-in copy task, seed 0"
    return KVBudgetResult(model, N_TOKENS, 4, 256, 83, ranking, runs, check, texts)


def write_long_results(directory: Path, **options) -> Path:
    """model_long-context.json and model_kv-budget.json in ``directory`` (made), as the
    commands write them (``headlab.results.json_store`` format)."""
    from headlab.results.json_store import write_result

    directory.mkdir(parents=True, exist_ok=True)
    model = options.pop("model", "SmolLM2-135M")
    write_result(directory / "model_long-context.json", long_context_result(model=model, **options))
    write_result(directory / "model_kv-budget.json", kv_budget_result(model=model))
    return directory


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))

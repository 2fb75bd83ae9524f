"""The one place where the report talks to the answer engine (headlab.analysis).

Everything below returns plain data (dicts, lists, numpy arrays) so that the sections and the
template do not depend on the analysis classes. When the answer engine is missing from this build
the functions return None and the page says so in one line.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import torch

from headlab.analysis.params import parameter_table
from headlab.attention.module import MultiHeadAttention
from headlab.report.heatmap import HeatmapView, heatmap_data

DRAWS = 10  # each seed set-up is also measured over seeds 0 .. DRAWS - 1 (a few seconds)


def seed_scenarios(seed: int = 0) -> list[dict] | None:
    """The seed scenarios as plain data (a fresh copy each call; see ``_seed_scenarios``)."""
    scenarios = _seed_scenarios(seed)
    return None if scenarios is None else copy.deepcopy(scenarios)


# Deterministic in ``seed`` and a few seconds each on CPU: measured once a process.
@functools.lru_cache(maxsize=4)
def _seed_scenarios(seed: int) -> list[dict] | None:
    """The seed scenarios, measured: [{name, question, command, result, explanation, heatmap}].

    ``result`` is ``Comparison.to_dict()``; ``heatmap`` the per-head weights of both sides
    (first batch element) as heatmap data. None when the answer engine is not installed.
    """
    try:
        from headlab.analysis import run_seed_scenarios
    except ImportError:
        return None
    out = []
    for scenario in run_seed_scenarios(seed=seed, draws=DRAWS):
        comparison = scenario.comparison
        w_a = _numpy(comparison.weights_a)[0]  # (head_a, q_pos, k_pos)
        w_b = _numpy(comparison.weights_b)[0]
        tokens = [f"x{i}" for i in range(w_a.shape[-1])]
        views = [
            HeatmapView(_heads_label(comparison.heads_a), w_a[None]),
            HeatmapView(_heads_label(comparison.heads_b), w_b[None]),
        ]
        out.append(
            {
                "name": scenario.name,
                "question": scenario.question,
                "command": scenario.command,
                "result": comparison.to_dict(),
                "explanation": scenario.explanation,
                "draws": None if scenario.draws is None else scenario.draws.to_dict(),
                "heatmap": heatmap_data(
                    scenario.name,
                    tokens,
                    views,
                    note="Positions of the first batch element; same weights on both sides.",
                ),
            }
        )
    return out


def coupling(
    *, d_model: int = 48, num_heads: int = 6, seq_len: int = 7, seed: int = 0
) -> dict | None:
    """Gradient coupling of a seeded module with ``num_heads`` heads and of its 1-head view.

    Returns {d_model, num_heads, seq_len, matrices: [{title, matrix (h, h), off_diagonal_max}]},
    or None when the answer engine is not installed.
    """
    try:
        from headlab.analysis import gradient_coupling
    except ImportError:
        return None
    gen = torch.Generator().manual_seed(seed)
    module = MultiHeadAttention(d_model, num_heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / d_model**0.5)
    x = torch.randn(1, seq_len, d_model, generator=gen, dtype=torch.float64)
    matrices = []
    for title, view, blocks in (
        (f"{num_heads} heads", module, None),
        ("1 head, same weights", module.with_num_heads(1), num_heads),
    ):
        matrix = np.asarray(gradient_coupling(view, x, blocks=blocks), dtype=np.float64)
        off = matrix[~np.eye(len(matrix), dtype=bool)]
        matrices.append(
            {
                "title": title,
                "matrix": matrix.tolist(),
                "off_diagonal_max": float(np.abs(off).max()) if off.size else 0.0,
            }
        )
    return {"d_model": d_model, "num_heads": num_heads, "seq_len": seq_len, "matrices": matrices}


def parameter_rows(d_model: int = 512) -> list[dict]:
    """Full multi-head rows for 1..16 heads, then 8 heads with 4, 2, 1 K/V heads (GQA, MQA)."""
    rows = parameter_table(d_model, [1, 2, 4, 8, 16]) + parameter_table(d_model, [8], [4, 2, 1])
    return [r.to_dict() for r in rows]


def _heads_label(heads: int) -> str:
    return "1 head" if heads == 1 else f"{heads} heads"


def _numpy(tensor: object) -> np.ndarray:
    if isinstance(tensor, torch.Tensor):
        return tensor.detach().to(torch.float64).cpu().numpy()
    return np.asarray(tensor, dtype=np.float64)

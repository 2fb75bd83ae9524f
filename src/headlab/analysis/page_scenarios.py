"""The seed scenarios as the page shows them: ``analysis.scenarios.seed_comparisons`` turned into
plain data (each ``ScenarioResult``), with the per-head weights of both sides (read from the
``Comparison`` beside it) as heatmap data."""

from __future__ import annotations

import copy
import functools

import numpy as np
import torch

from headlab.analysis.scenarios import seed_comparisons
from headlab.results.attention_views import AttentionView
from headlab.results.explorers import heatmap_data

DRAWS = 10  # each seed set-up is also measured over seeds 0 .. DRAWS - 1 (a few seconds)


def seed_scenarios(seed: int = 0) -> list[dict]:
    """[{name, question, command, result, explanation, draws, heatmap}], a fresh copy each call.

    ``result`` is ``ComparisonResult.to_dict()`` (the ``--json`` document); ``heatmap`` the
    per-head weights of both sides (first batch element) as heatmap data.
    """
    return copy.deepcopy(_seed_scenarios(seed))


# Deterministic in ``seed`` and a few seconds on CPU: measured once a process.
@functools.lru_cache(maxsize=4)
def _seed_scenarios(seed: int) -> list[dict]:
    out = []
    for scenario, comparison in seed_comparisons(seed=seed, draws=DRAWS):
        w_a = _numpy(comparison.weights_a)[0]  # (head_a, q_pos, k_pos)
        w_b = _numpy(comparison.weights_b)[0]
        tokens = [f"x{i}" for i in range(w_a.shape[-1])]
        views = [
            AttentionView(_heads_label(comparison.heads_a), w_a[None]),
            AttentionView(_heads_label(comparison.heads_b), w_b[None]),
        ]
        out.append(
            {
                "name": scenario.name,
                "question": scenario.question,
                "command": scenario.command,
                "result": scenario.comparison.to_dict(),
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


def _heads_label(heads: int) -> str:
    return "1 head" if heads == 1 else f"{heads} heads"


def _numpy(tensor: object) -> np.ndarray:
    if isinstance(tensor, torch.Tensor):
        return tensor.detach().to(torch.float64).cpu().numpy()
    return np.asarray(tensor, dtype=np.float64)

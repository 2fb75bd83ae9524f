"""Shared fixtures of the report tests: results files that follow the documented schemas."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

LAYERS, HEADS = 3, 5  # distinct sizes so that a transposed grid cannot pass
METRICS = ("entropy", "max_weight", "cls", "sep", "self", "prev", "contribution_norm")


def write_results(directory: Path, seed: int = 7) -> Path:
    """Write model_heads/collapse/prune JSON and sweep.jsonl with seeded values into directory."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    heads = {
        "model": "fixture-encoder",
        "n_texts": 11,
        "num_layers": LAYERS,
        "num_heads": HEADS,
        "metrics": {m: rng.random((LAYERS, HEADS)).round(4).tolist() for m in METRICS},
    }
    collapse = {
        "model": "fixture-encoder",
        "n_texts": 11,
        "all_layers": [
            {"num_heads": h, "mean_cosine": 1 - 0.1 * i, "nn_agreement": 1 - 0.15 * i}
            for i, h in enumerate((5, 1))
        ],
        "per_layer": [
            {"layer": l, "num_heads": 1, "mean_cosine": 0.9 - 0.1 * l, "nn_agreement": 0.8}
            for l in range(LAYERS)
        ],
    }
    prune = {
        "model": "fixture-encoder",
        "n_texts": 11,
        "steps": [
            {
                "order": order,
                "fraction_pruned": f,
                "heads_pruned": round(f * LAYERS * HEADS),
                "params": 1000 - int(100 * f),
                "latency_ms": 3.0 - f,
                "mean_cosine": 1 - f * (0.5 if order == "importance" else 0.9),
                "nn_agreement": 1 - f * (0.4 if order == "importance" else 0.8),
            }
            for order in ("importance", "random")
            for f in (0.0, 0.2, 0.4, 0.6)
        ],
    }
    lines = []
    for task in ("retrieval", "copy"):
        for h in (1, 2, 4):
            for seed_ in (0, 1):
                cfg = {
                    "task": task,
                    "num_heads": h,
                    "num_kv_heads": h,
                    "head_dim": 16 // h,
                    "d_model": 16,
                    "layers": 1,
                    "seed": seed_,
                    "steps": 20,
                }
                run_id = f"{task}-{h}-{seed_}"
                for step, final in ((10, False), (20, True)):
                    acc = 0.2 + 0.1 * h + 0.01 * seed_ + (0.05 if final else 0.0)
                    lines.append(
                        {
                            "run_id": run_id,
                            "config": cfg,
                            "step": step,
                            "loss": 1.0,
                            "accuracy": acc,
                            "final": final,
                            "head_entropy": None,
                            "params": 99,
                        }
                    )
    lines.append(
        {
            "run_id": "unfinished",
            "config": {
                "task": "copy",
                "num_heads": 8,
                "num_kv_heads": 8,
                "head_dim": 2,
                "d_model": 16,
                "layers": 1,
                "seed": 0,
                "steps": 20,
            },
            "step": 3,
            "loss": 2.0,
            "accuracy": 0.0,
            "final": False,
            "head_entropy": None,
            "params": 99,
        }
    )
    (directory / "model_heads.json").write_text(json.dumps(heads))
    (directory / "model_collapse.json").write_text(json.dumps(collapse))
    (directory / "model_prune.json").write_text(json.dumps(prune))
    (directory / "sweep.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n\n")
    return directory


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    return write_results(tmp_path / "results")


@pytest.fixture(scope="session")
def shared_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One set of results files for module-scoped builds (read only)."""
    return write_results(tmp_path_factory.mktemp("shared") / "results")

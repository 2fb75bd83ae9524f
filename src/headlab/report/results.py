"""Read the results files of model analyses and sweeps (schemas in docs/report.md).

Each reader returns the parsed data, or None when the file is missing. A file that exists but does
not follow its schema raises ValueError naming the file and what is wrong: a broken file is not the
same as a missing one, and the report must not hide it.
"""

from __future__ import annotations

import json
from pathlib import Path

from headlab.experiments.results import final_rows, read_rows

# file name -> the command that produces it (shown instead of an empty section)
PRODUCERS = {
    "model_heads.json": "headlab model heads",
    "model_collapse.json": "headlab model collapse",
    "model_prune.json": "headlab model prune",
    "sweep.jsonl": "headlab sweep",
}


def _load_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: expected JSON, got a parse error ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _require(path: Path, data: dict, keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"{path}: expected keys {list(keys)}, missing {missing}")


def _grid(path: Path, name: str, grid: object, layers: int, heads: int) -> list[list[float]]:
    ok = (
        isinstance(grid, list)
        and len(grid) == layers
        and all(isinstance(row, list) and len(row) == heads for row in grid)
    )
    if not ok:
        raise ValueError(f"{path}: metric {name!r} must be {layers} x {heads} (layers x heads)")
    return [[float(v) for v in row] for row in grid]


def _agreement(path: Path, row: dict) -> str:
    """The agreement measure of a row: an encoder's nn_agreement or a decoder's
    next_token_agreement (headlab.heads.quality)."""
    for key in ("nn_agreement", "next_token_agreement"):
        if key in row:
            return key
    raise ValueError(f"{path}: expected nn_agreement or next_token_agreement in {sorted(row)}")


def read_model_heads(directory: Path) -> dict | None:
    """model_heads.json -> {model, n_texts, num_layers, num_heads, metrics: {name: LxH}}."""
    path = directory / "model_heads.json"
    data = _load_json(path)
    if data is None:
        return None
    _require(path, data, ("model", "n_texts", "num_layers", "num_heads", "metrics"))
    layers, heads = int(data["num_layers"]), int(data["num_heads"])
    metrics = {
        str(k): _grid(path, str(k), v, layers, heads) for k, v in dict(data["metrics"]).items()
    }
    return {**data, "num_layers": layers, "num_heads": heads, "metrics": metrics}


def read_model_collapse(directory: Path) -> dict | None:
    """model_collapse.json -> {model, n_texts, all_layers: [...], per_layer: [...]}."""
    path = directory / "model_collapse.json"
    data = _load_json(path)
    if data is None:
        return None
    _require(path, data, ("model", "n_texts", "all_layers", "per_layer"))
    for row in [*data["all_layers"], *data["per_layer"]]:
        _require(path, row, ("num_heads", _agreement(path, row)))
    return data


def read_model_prune(directory: Path) -> dict | None:
    """model_prune.json -> {model, n_texts, steps: [{order, fraction_pruned, ...}, ...]}."""
    path = directory / "model_prune.json"
    data = _load_json(path)
    if data is None:
        return None
    _require(path, data, ("model", "n_texts", "steps"))
    for row in data["steps"]:
        _require(path, row, ("order", "fraction_pruned", _agreement(path, row)))
    return data


def read_sweep(directory: Path) -> list[dict] | None:
    """sweep.jsonl -> the final row of each run: [{run_id, config, accuracy, ...}, ...].

    Read with the sweep's own reader and schema: a torn last line (an interrupted sweep) and lines
    that are not results rows are skipped with its warnings. Runs without a final row (still
    running, interrupted) are left out.
    """
    path = directory / "sweep.jsonl"
    if not path.is_file():
        return None
    return final_rows(read_rows(path))

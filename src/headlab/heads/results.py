"""Writing results documents (JSON) under the output policy, atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path

from headlab.files import write_output
from headlab.locations import RESULTS_DIR
from headlab.output_policy import Kind

__all__ = ["RESULTS_DIR", "write_json"]


def write_json(path: str | Path, document: dict, kind: str, *, force: bool = False) -> dict:
    """Write ``document`` as JSON to ``path``, tagged ``{"headlab": kind, ...}``; return that.

    Replaces only a missing path, an empty file, or a headlab results file of the same ``kind``
    (OutputRefused otherwise, unless ``force``). NaN or infinity in ``document`` is a ValueError
    naming the field: JSON has no NaN, and a number that is not finite is a failed measurement.
    """
    _check_finite(document, kind)
    tagged = {"headlab": kind, **document}
    text = json.dumps(tagged, indent=1, allow_nan=False) + "\n"
    write_output(path, text.encode("utf-8"), Kind.json(kind), force=force)
    return tagged


def _check_finite(value: object, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value} (not written)")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_finite(item, f"{where}[{index}]")

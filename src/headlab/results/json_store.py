"""Results documents (JSON): written under the output policy, atomically; read through their type.

Every results type (``HeadStatistics``, ``CollapseResult``, ``ImportanceResult``, ``PruneResult``,
``AblationResult``, ``LongContextResult``, ``ExpressivityResult``, ``SpecialisationResult``,
``RedundancyResult``) has ``KIND`` (the file's ``"headlab"`` tag), ``to_dict`` and a validating
``from_dict``; ``write_result`` and ``read_result`` go through them (schemas in docs/files.md).
Their parts are typed too where a part has fields of its own (``LongContextResult``'s
``TextContext``, ``HeavyHitters``, ``LongContextFindings``; the rows of collapse, prune,
expressivity (``RankRow``, ``PatternRow``), specialisation (``SpecialisationRun`` and its
``Checkpoint``s) and redundancy (``LayerSpectrum``, ``CurvePoint``)), each with its own
``to_dict`` and a ``from_dict`` that reads it through ``headlab.results.schema.Fields``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Protocol, TypeVar

from headlab.results.atomic_files import write_output
from headlab.results.input_files import read_json as bounded_json
from headlab.results.locations import RESULTS_DIR
from headlab.results.output_policy import Kind
from headlab.results.schema import check_kind

__all__ = ["RESULTS_DIR", "read_result", "write_json", "write_result"]


class Result(Protocol):
    KIND: str

    def to_dict(self) -> dict: ...

    @classmethod
    def from_dict(cls, data: dict, where: str = ...) -> Any: ...


R = TypeVar("R", bound=Result)


def write_json(path: str | Path, document: dict, kind: str, *, force: bool = False) -> dict:
    """Write ``document`` as JSON to ``path``, tagged ``{"headlab": kind, ...}``; return that
    as read back.

    Replaces only a missing path, an empty file, or a headlab results file of the same ``kind``
    (OutputRefused otherwise, unless ``force``). NaN or infinity in ``document`` is a ValueError
    naming the field: JSON has no NaN, and a number that is not finite is a failed measurement.
    """
    _check_finite(document, kind)
    tagged = {"headlab": kind, **document}
    text = json.dumps(tagged, indent=1, allow_nan=False) + "\n"
    write_output(path, text.encode("utf-8"), Kind.json(kind), force=force)
    return json.loads(text)  # as a reader sees it: lists, not tuples


def _check_finite(value: object, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value} (not written)")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_finite(item, f"{where}[{index}]")


def write_result(path: str | Path, result: Result, *, force: bool = False) -> dict:
    """Write ``result.to_dict()`` tagged with its ``KIND`` (see ``write_json``); return that."""
    return write_json(path, result.to_dict(), type(result).KIND, force=force)


def read_json(path: str | Path) -> dict | None:
    """The JSON object in ``path``, or None when nothing is there; ValueError naming the file for
    anything but a JSON object (``headlab.results.input_files.read_json``: a regular file, bounded
    in size and depth)."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    return bounded_json(path, "")


def read_result(path: str | Path, kind: type[R]) -> R | None:
    """The ``kind`` results file at ``path`` through ``kind.from_dict``, or None when missing.

    ValueError naming the file and the field when it is not such a file (a ``"headlab"`` tag of
    another kind, a missing field, a grid of the wrong shape).
    """
    data = read_json(path)
    if data is None:
        return None
    where = f"{path}: {kind.KIND}"
    check_kind(data, kind.KIND, where)
    return kind.from_dict(data, where)

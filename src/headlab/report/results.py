"""Read the results files the report shows, each through its results type (docs/files.md).

``read_section`` returns a file's data as the figures take it (``to_dict`` of the type that
validated it), or None when the file is missing. A file that exists but does not follow its schema
raises ValueError naming the file and the field: a broken file is not the same as a missing one,
and the report must not hide it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from headlab.experiments.results import read_finals
from headlab.heads.collapse import CollapseResult
from headlab.heads.pruning import PruneResult
from headlab.heads.results import read_result
from headlab.heads.statistics import HeadStatistics


def _through(kind: type) -> Callable[[Path], dict | None]:
    """A reader of ``kind``'s results file: validated by ``kind.from_dict``, given as to_dict."""

    def read(path: Path) -> dict | None:
        result = read_result(path, kind)
        return None if result is None else result.to_dict()

    return read


def _sweep(path: Path) -> list[dict] | None:
    """The final row of each finished run; a torn or foreign line is skipped with a warning."""
    return [r.to_dict() for r in read_finals(path)] if path.is_file() else None


# file name -> (the command that produces it, shown instead of an empty section; its reader)
FILES: dict[str, tuple[str, Callable[[Path], dict | list[dict] | None]]] = {
    "model_heads.json": ("headlab model heads", _through(HeadStatistics)),
    "model_collapse.json": ("headlab model collapse", _through(CollapseResult)),
    "model_prune.json": ("headlab model prune", _through(PruneResult)),
    "sweep.jsonl": ("headlab sweep", _sweep),
}
PRODUCERS = {name: producer for name, (producer, _) in FILES.items()}


def read_section(directory: Path, filename: str) -> dict | list[dict] | None:
    """The data of ``directory / filename`` (one of FILES), or None when it is missing."""
    return FILES[filename][1](Path(directory) / filename)

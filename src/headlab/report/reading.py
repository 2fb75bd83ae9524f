"""Read the results files the report shows, each through its results type (docs/files.md).

``read_section`` returns a file's data as the figures take it (``to_dict`` of the type that
validated it), or None when the file is missing. A file that exists but does not follow its schema
raises ValueError naming the file and the field. The report does not stop there: ``skipping``
turns that error into a ``Skipped`` section and one warning naming the file and the reason, so that
a broken file is said (on the page and on stderr), not taken for a missing one, and the rest of the
report is still built.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from headlab.notices import HeadlabWarning
from headlab.results.collapse_result import CollapseResult
from headlab.results.head_statistics import HeadStatistics
from headlab.results.json_store import read_result
from headlab.results.jsonl_store import read_finals
from headlab.results.prune_result import PruneResult

T = TypeVar("T")


class SkippedResultsWarning(HeadlabWarning):
    """A results file that does not follow its schema was left out of the report (named)."""


@dataclass(frozen=True)
class Skipped:
    """A results file left out of the report, and why (the field, expected and received)."""

    path: Path
    reason: str

    def part(self, command: str) -> dict:
        """The page's part for it: the file, why it was skipped, the command that remakes it."""
        return {"missing": command, "file": str(self.path), "skipped": self.reason}


# What data a schema let through can still raise while a part is drawn (a ragged grid in NumPy,
# an empty list): the part is skipped, naming the file, and the rest of the report is built.
DATA_ERRORS = (TypeError, KeyError, IndexError, StopIteration, ArithmeticError)


def skipping(path: Path, build: Callable[[], T]) -> T | Skipped:
    """``build()`` (which reads ``path`` and draws its part), or Skipped with a
    SkippedResultsWarning naming the file when it raises ValueError (the file does not follow
    its schema) or one of ``DATA_ERRORS`` (its data cannot be drawn)."""
    try:
        return build()
    except ValueError as error:
        reason = str(error).removeprefix(f"{path}: ")
    except DATA_ERRORS as error:
        reason = f"its data cannot be drawn ({type(error).__name__}: {error})"
    warnings.warn(f"skipped {path}: {reason}", SkippedResultsWarning, stacklevel=2)
    return Skipped(path, reason)


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

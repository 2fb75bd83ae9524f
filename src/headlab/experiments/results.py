"""sweep.jsonl: append-only results that survive interrupts.

Writers append a run's rows as whole lines in one write, then flush and fsync, so a crash loses
at most the run being written; a torn last line (a killed writer) is ignored on reading with a
warning, and cut off before the next append so that it never glues onto a new line.

Row schema (one JSON object per line; a run has one row per evaluation point, the last final):
    {"run_id": str, "config": {RunConfig fields}, "step": int, "loss": float,
     "accuracy": float, "final": bool, "head_entropy": [float, L*H layer-major] | null,
     "params": int, "seconds": float | null}
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

# Every row we write starts so (run_id first): how a torn line is told from a foreign one.
ROW_START = '{"run_id":'


class TornLineWarning(UserWarning):
    """The results file ends in an incomplete line (an interrupted write); it was ignored."""


def read_rows(path: str | Path) -> list[dict]:
    """All complete rows of a results file ([] when it does not exist).

    A last line without a newline that starts like our rows but does not parse (a torn write) is
    skipped with a TornLineWarning; any other bad line means the file is not ours or was edited:
    ValueError with its number.
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or "run_id" not in row:
                raise ValueError("not a results row")
        except ValueError:
            # No newline after it and our row's opening: a write of ours that was cut short.
            if number == len(lines) and line.startswith(ROW_START):
                warnings.warn(
                    f"{path}: ignoring a torn last line (an interrupted write)",
                    TornLineWarning,
                    stacklevel=2,
                )
                continue
            raise ValueError(
                f"{path}:{number}: expected a JSON results row, got {line[:60]!r}"
            ) from None
        rows.append(row)
    return rows


def finished_run_ids(rows: list[dict]) -> set[str]:
    """run_ids with a final row: runs that need not run again."""
    return {r["run_id"] for r in rows if r.get("final")}


def final_rows(rows: list[dict]) -> list[dict]:
    """One final row per run_id (the last written wins)."""
    return list({r["run_id"]: r for r in rows if r.get("final")}.values())


class ResultsWriter:
    """Appends rows to a results file; each ``append`` is whole lines, flushed and fsynced."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_tail()

    def _cut_torn_tail(self) -> None:
        # A file that does not end in a newline was torn by an interrupted append of ours; cut
        # the fragment so that the next line starts clean (read_rows already warns about it).
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as f:
            data = f.read()
            if data.endswith(b"\n"):
                return
            start = data.rfind(b"\n") + 1
            if not data[start:].startswith(ROW_START.encode()):
                raise ValueError(f"{self.path} does not end like a results file; not appending")
            f.truncate(start)
            f.flush()
            os.fsync(f.fileno())

    def append(self, rows: list[dict]) -> None:
        # run_id first, always: ROW_START is how a torn line of ours is recognised.
        text = "".join(
            json.dumps({"run_id": r["run_id"], **r}, separators=(",", ":")) + "\n" for r in rows
        )
        with self.path.open("a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

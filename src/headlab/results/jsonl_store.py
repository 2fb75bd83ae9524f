"""sweep.jsonl: the one reader of sweep results, and the row schema (the writer: ``jsonl_writer``).

The same machinery serves any JSONL results file whose rows another module defines (a
``RowKind``: how a row is checked, the key every written row starts with, what writes it); the
sweep's rows are the default, ``SWEEP``. ``headlab.experiments.corpus_roles`` has its own.

Row schema (one JSON object per line; a run has one row per evaluation point, the last final):
    {"run_id": str, "config": {RunConfig fields}, "step": int >= 0, "loss": finite float,
     "accuracy": float in [0, 1], "final": bool, "head_entropy": [finite float, L*H layer-major]
     | null, "params": int >= 0, "seconds": finite float >= 0 | null}

A results file is recognised from its first line (after blank lines), which must start as headlab
writes rows (``RowKind.start``, ``{"run_id":``); only those first bytes are read before a file that
is not one is refused, and the rest is read line by line. Reading never loses a complete valid row.
A line that is not valid UTF-8, not JSON, or not a row of this schema is skipped and reported
(``SkippedLinesWarning``, with its line number and the reason); so is a line longer than
``MAX_LINE_BYTES``, which is never held whole: its first bytes are read, the rest skipped a
chunk at a time. A last line without its newline
that starts as headlab writes rows but does not parse is a torn write (``TornLineWarning``); any
other last line is someone's text, skipped but never removed.
Writing (``headlab.results.jsonl_writer``) holds an OS lock on the file for the whole sweep,
appends whole lines in one write, and cuts only headlab's own torn row.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from headlab.notices import HeadlabWarning
from headlab.results.input_files import MAX_JSON_BYTES, MAX_JSON_DEPTH, json_depth, open_regular
from headlab.results.schema import is_int, is_number

if TYPE_CHECKING:
    from headlab.results.run_config import RunConfig


class TornLineWarning(HeadlabWarning):
    """The results file ends in an incomplete line (an interrupted write); it was ignored."""


class SkippedLinesWarning(HeadlabWarning):
    """Lines of a results file that are not results rows were skipped (numbers and reasons)."""


@dataclass(frozen=True)
class SkippedLine:
    number: int  # 1-based line number
    reason: str


@dataclass
class ResultsFile:
    """What a results file holds: valid rows in file order, and what was skipped and why."""

    rows: list[dict] = field(default_factory=list)
    skipped: list[SkippedLine] = field(default_factory=list)
    torn_tail: int = 0  # bytes of a last line that is headlab's interrupted write (0: none)


def _config_problem(config: object) -> str | None:
    from headlab.results.run_config import RunConfig

    if not isinstance(config, dict):
        return "config is not an object"
    for f in fields(RunConfig):
        if f.name not in config:
            if f.default is not MISSING:  # has a default: optional in rows of older versions
                continue
            return f"config lacks {f.name!r}"
        value, expected = config[f.name], f.type
        if expected in ("int", int) and not is_int(value):
            return f"config.{f.name} is not an integer"
        if expected in ("float", float) and not is_number(value):
            return f"config.{f.name} is not a finite number"
        if expected in ("str", str) and not isinstance(value, str):
            return f"config.{f.name} is not a string"
    return None


def row_problem(row: object) -> str | None:
    """Why ``row`` is not a valid results row, or None when it is."""
    if not isinstance(row, dict):
        return "not a JSON object"
    checks = (
        ("run_id", lambda v: isinstance(v, str) and v != "", "a non-empty string"),
        ("step", lambda v: is_int(v) and v >= 0, "an integer >= 0"),
        ("loss", is_number, "a finite number"),
        ("accuracy", lambda v: is_number(v) and 0 <= v <= 1, "a number in [0, 1]"),
        ("final", lambda v: isinstance(v, bool), "true or false"),
        ("params", lambda v: is_int(v) and v >= 0, "an integer >= 0"),
    )
    for key, ok, expected in checks:
        if key not in row:
            return f"missing {key!r}"
        if not ok(row[key]):
            return f"{key!r} must be {expected}, got {json.dumps(row[key])[:40]}"
    entropy = row.get("head_entropy")
    if entropy is not None and not (
        isinstance(entropy, list) and all(is_number(v) for v in entropy)
    ):
        return "'head_entropy' must be a list of finite numbers or null"
    seconds = row.get("seconds")
    if seconds is not None and not (is_number(seconds) and seconds >= 0):
        return "'seconds' must be a finite number >= 0 or null"
    return _config_problem(row.get("config"))


@dataclass(frozen=True)
class RowKind:
    """One kind of results rows: ``problem(row)`` says why a parsed line is not such a row (None
    when it is); every row written starts with the key ``first``; ``writer`` names what writes
    them, in messages ("another headlab sweep is writing ...")."""

    problem: Callable[[object], str | None]
    first: str = "run_id"
    writer: str = "sweep"

    @property
    def start(self) -> bytes:
        """How every line written starts."""
        return f'{{"{self.first}":'.encode()


SWEEP = RowKind(row_problem)


@dataclass(frozen=True)
class SweepRow:
    """One line of sweep.jsonl: a run's evaluation at ``step`` (schema in the module docstring).

    head_entropy (layer-major L*H floats) and seconds are set on the final row only.
    """

    run_id: str
    config: RunConfig
    step: int
    loss: float
    accuracy: float
    final: bool
    params: int
    head_entropy: list[float] | None = None
    seconds: float | None = None

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "config": self.config.to_dict(),
            "step": self.step,
            "loss": self.loss,
            "accuracy": self.accuracy,
            "final": self.final,
            "head_entropy": self.head_entropy,
            "params": self.params,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "sweep row") -> SweepRow:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        from headlab.results.run_config import RunConfig

        problem = row_problem(data)
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
        entropy, seconds = data.get("head_entropy"), data.get("seconds")
        return cls(
            run_id=data["run_id"],
            config=RunConfig.from_dict(data["config"]),
            step=data["step"],
            loss=float(data["loss"]),
            accuracy=float(data["accuracy"]),
            final=data["final"],
            params=data["params"],
            head_entropy=None if entropy is None else [float(v) for v in entropy],
            seconds=None if seconds is None else float(seconds),
        )


# How much of a file is read to recognise it; a first line starts within it unless blank lines
# fill it.
PEEK_BYTES = 64 * 1024
#: The longest line read: a row is one JSON document, bounded as every JSON headlab reads.
MAX_LINE_BYTES = MAX_JSON_BYTES
_SKIP_CHUNK = 2**20


@dataclass(frozen=True)
class LongLine:
    """A line longer than ``MAX_LINE_BYTES``, skipped unread: at least ``nbytes`` long."""

    nbytes: int


def bounded_lines(handle: io.BufferedIOBase, start: bytes = b"") -> Iterable[bytes | LongLine]:
    """The lines of ``handle`` from where it stands (the first begins with ``start``), each with
    its newline but perhaps the last; a line longer than ``MAX_LINE_BYTES`` is a ``LongLine``,
    read past a chunk at a time and never held whole."""
    limit = MAX_LINE_BYTES
    while True:
        line = start + handle.readline(max(1, limit + 1 - len(start)))
        start = b""
        if not line:
            return
        if len(line) <= limit:
            yield line
            continue
        nbytes = len(line)
        while not line.endswith(b"\n"):
            line = handle.readline(_SKIP_CHUNK)
            if not line:
                break
            nbytes += len(line)
        yield LongLine(nbytes)


def nested_too_deep(depth: int) -> str:
    return f"JSON nested {depth} deep, expected at most {MAX_JSON_DEPTH}"


def parse_lines(lines: Iterable[bytes | LongLine], kind: RowKind = SWEEP) -> ResultsFile:
    """Parse the lines (each with its newline, but perhaps the last) of a results file of
    ``kind`` rows (never raises; see the module docstring)."""
    result = ResultsFile()
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, LongLine):
            reason = f"{raw.nbytes} bytes long, expected at most {MAX_LINE_BYTES} (not read)"
            result.skipped.append(SkippedLine(number, reason))
            continue
        if not raw.strip():
            continue
        try:
            depth = json_depth(raw)
            row = None if depth > MAX_JSON_DEPTH else json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            row, problem = None, "not UTF-8 text"
        except ValueError:
            row, problem = None, "not JSON"
        else:
            problem = nested_too_deep(depth) if row is None else kind.problem(row)
        if problem is None:
            result.rows.append(row)
        elif not raw.endswith(b"\n") and row is None and raw.startswith(kind.start):
            result.torn_tail = len(raw)
        else:
            result.skipped.append(SkippedLine(number, problem))
    return result


def parse_results(data: bytes, kind: RowKind = SWEEP) -> ResultsFile:
    """Parse the bytes of a results file of ``kind`` rows (``parse_lines`` of its lines)."""
    return parse_lines(io.BytesIO(data), kind)


def first_line_problem(head: bytes, kind: RowKind = SWEEP) -> str | None:
    """Why a file whose first bytes are ``head`` (``PEEK_BYTES`` of them, or all it holds) is not
    a results file of ``kind`` rows, or None when it is one (or empty)."""
    text = head.lstrip()
    if not text and len(head) < PEEK_BYTES:
        return None
    if text.startswith(kind.start):
        return None
    if not text:
        return f"its first {PEEK_BYTES} bytes are blank"
    start = kind.start.decode()
    return f"its first line does not start with {start} as headlab {kind.writer} rows do"


def read_handle(handle: io.BufferedIOBase, kind: RowKind = SWEEP) -> tuple[ResultsFile, str | None]:
    """What the binary file ``handle`` holds from where it stands, or why it is not a results
    file: then only its first ``PEEK_BYTES`` were read. The rest is read a line at a time."""
    head = handle.read(PEEK_BYTES)
    problem = first_line_problem(head, kind)
    if problem is not None:
        return ResultsFile(), problem
    *whole, cut = head.split(b"\n")

    def lines() -> Iterable[bytes | LongLine]:
        yield from (line + b"\n" for line in whole)
        yield from bounded_lines(handle, cut)  # the line the peek cut, completed, and the rest

    return parse_lines(lines(), kind), None


def read_results(path: str | Path, kind: RowKind = SWEEP) -> ResultsFile:
    """Read a results file of ``kind`` rows (an empty ResultsFile when it does not exist);
    ValueError when it is not one (not a regular file, or a first line headlab did not write)."""
    path = Path(path)
    if not os.path.lexists(path):
        return ResultsFile()
    with open_regular(path, "results file") as handle:  # a FIFO or a device is refused
        content, problem = read_handle(handle, kind)
    if problem is not None:
        raise ValueError(f"{path} is not a results file: {problem}")
    return content


def warn_about(path: Path, result: ResultsFile) -> None:
    if result.torn_tail:
        warnings.warn(
            f"{path}: ignoring a torn last line (an interrupted write)",
            TornLineWarning,
            stacklevel=3,
        )
    if result.skipped:
        shown = "; ".join(f"line {s.number}: {s.reason}" for s in result.skipped[:5])
        more = f" (and {len(result.skipped) - 5} more)" if len(result.skipped) > 5 else ""
        n = len(result.skipped)
        what = "1 line that is not a results row"
        if n > 1:
            what = f"{n} lines that are not results rows"
        warnings.warn(
            f"{path}: skipped {what}: {shown}{more}",
            SkippedLinesWarning,
            stacklevel=3,
        )


def read_rows(path: str | Path, kind: RowKind = SWEEP) -> list[dict]:
    """All valid rows of a results file ([] when it does not exist); warns about what it skips."""
    result = read_results(path, kind)
    warn_about(Path(path), result)
    return result.rows


def finished_run_ids(rows: list[dict]) -> set[str]:
    """run_ids with a final row: runs that need not run again."""
    return {r["run_id"] for r in rows if r["final"] is True}


def final_rows(rows: list[dict]) -> list[dict]:
    """One final row per run_id (the last written wins)."""
    return list({r["run_id"]: r for r in rows if r["final"] is True}.values())


def read_finals(path: str | Path) -> list[SweepRow]:
    """The final row of each run of a results file ([] when it does not exist), read with
    ``read_rows`` (warnings for what it skips). Runs without a final row (still running,
    interrupted) are left out."""
    return [SweepRow.from_dict(row) for row in final_rows(read_rows(path))]

"""Appending to a JSONL results file: append-only, locked, its end repaired (``jsonl_store``).

Writing holds an OS lock on the file for the whole run (a second writer into the same file is
refused with a clear message), appends whole lines in one write, flushes and fsyncs. Before the
first append a torn last line is cut; before every append a last line that lacks its newline (a
complete row, or text someone added) gets one, so the file only ever grows but for a torn row.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from headlab.results.input_files import open_regular
from headlab.results.jsonl_store import SWEEP, ResultsFile, RowKind, read_handle, warn_about
from headlab.results.output_policy import OutputRefused, check_not_input, check_parent

try:  # POSIX; elsewhere concurrent writers into one file are not detected
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


def check_results_output(path: str | Path) -> Path:
    """OutputRefused unless ``path`` is new or a regular file (not a link) in a writable folder.

    Whether an existing file holds results is checked when the writer opens it (under its lock).
    """
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OutputRefused(f"out={path} is not a regular file; expected a results file (JSONL)")
    check_parent(path, "out")
    check_not_input(path, "out")
    return path


def check_not_locked(path: str | Path, kind: RowKind = SWEEP) -> None:
    """ValueError now, before any work, when another writer holds the lock on ``path``."""
    path = Path(path)
    if fcntl is None or not path.is_file():
        return
    with path.open("rb") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"another headlab {kind.writer} is writing {path}; wait for it to finish, "
                "or choose another file"
            ) from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def check_appendable(path: str | Path, kind: RowKind = SWEEP) -> ResultsFile:
    """What ``path`` holds, read before any work to resume from it: OutputRefused unless it is
    new or a regular file of ``kind`` rows headlab may append to, ValueError when another writer
    holds its lock; warns about the lines it skips."""
    path = check_results_output(path)
    check_not_locked(path, kind)
    if not path.exists():
        return ResultsFile()
    with open_regular(path, "out") as handle:
        content = _appendable(path, handle, kind)
    warn_about(path, content)
    return content


def _appendable(path: Path, handle: io.BufferedIOBase, kind: RowKind) -> ResultsFile:
    """What ``handle`` holds; OutputRefused unless it is a results file of ``kind`` rows (one
    that holds only a torn row, or nothing, is one)."""
    content, problem = read_handle(handle, kind)
    if problem is None and content.skipped and not content.rows:
        problem = "none of its lines is one"
    if problem is not None:
        raise OutputRefused(
            f"out={path} holds no results rows ({problem}); not appending to a file headlab did "
            "not write (choose another file)"
        )
    return content


class ResultsWriter:
    """Appends rows to a results file while holding an exclusive OS lock on it.

    Opening checks the output policy (a regular file of results rows, or a new path), takes the
    lock (ValueError naming the file when another sweep holds it) and repairs the end of the file.
    Use as a context manager, or call ``close``; the lock also ends with the process.
    """

    def __init__(self, path: str | Path, kind: RowKind = SWEEP) -> None:
        self.kind = kind
        self.path = check_results_output(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a+b")  # noqa: SIM115 (held for the writer's lifetime)
        try:
            self._lock()
            self._repair_end()
        except BaseException:
            self._handle.close()
            raise

    def _lock(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        try:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"another headlab {self.kind.writer} is writing {self.path}; wait for it to "
                "finish, or choose another file"
            ) from None

    def read(self) -> ResultsFile:
        """The file's content as of now (under the lock: nobody else appends meanwhile)."""
        self._handle.seek(0)
        return read_handle(self._handle, self.kind)[0]

    def _repair_end(self) -> None:
        self._handle.seek(0)
        content = _appendable(self.path, self._handle, self.kind)
        if content.torn_tail:  # headlab's interrupted row: cut it so the next line starts clean
            self._handle.truncate(self._handle.seek(0, os.SEEK_END) - content.torn_tail)
            self._handle.flush()
            os.fsync(self._handle.fileno())

    def _write(self, data: bytes) -> None:
        """Append ``data`` as the start of a line: after a newline when the last line (a row that
        lacks it, or text someone added, even while the lock is held) does not end with one."""
        end = self._handle.seek(0, os.SEEK_END)
        if end:
            self._handle.seek(end - 1)
            if self._handle.read(1) != b"\n":
                data = b"\n" + data
        self._handle.seek(0, os.SEEK_END)
        self._handle.write(data)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def append(self, rows: list[dict]) -> None:
        """Append ``rows`` as whole lines (the kind's first key first), in one write."""
        first = self.kind.first
        text = "".join(
            json.dumps({first: r[first], **r}, separators=(",", ":"), allow_nan=False) + "\n"
            for r in rows
        )
        self._write(text.encode("utf-8"))

    def close(self) -> None:
        self._handle.close()  # closing the file releases the lock

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Progress of long commands on stderr: a bar on a terminal, plain lines elsewhere (a log, a
pipe), nothing with --json.

Where stderr is not a terminal a bar cannot be drawn, and a command that printed nothing for
two minutes looked hung: there, a command still running after ``FIRST_LINE_S`` seconds prints
one line saying what it does and how far it is, then one every ``EVERY_S`` seconds, and a last
line when it is done. A command that ends sooner prints nothing. ``HEADLAB_PROGRESS_AFTER``
(seconds) sets when the first line comes ("never" for none: a log that must hold only the
command's own lines, as the tests' subprocesses ask).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

FIRST_LINE_S = 2.0  # where stderr is no terminal: a command that ends sooner prints no line
AFTER_VARIABLE = "HEADLAB_PROGRESS_AFTER"


def first_line_s() -> float:
    """When the first line comes: ``HEADLAB_PROGRESS_AFTER`` seconds ("never": no line),
    else ``FIRST_LINE_S``; a value that is no number of seconds >= 0 is ignored."""
    value = os.environ.get(AFTER_VARIABLE, "").strip().lower()
    if value == "never":
        return threading.TIMEOUT_MAX
    try:
        seconds = float(value)
    except ValueError:
        return FIRST_LINE_S
    return seconds if math.isfinite(seconds) and seconds >= 0 else FIRST_LINE_S


EVERY_S = 10.0  # then one line this often


@contextmanager
def progress(
    description: str, total: int | None, *, quiet: bool = False
) -> Iterator[Callable[..., None]]:
    """Yield ``update(done=None, total=None, detail=None)``: a library's ``on_step(done, total)``
    as it is, and ``detail`` a short text shown after the count (the sweep's current run and
    loss).

    ``description`` says what the command is doing, in words. On a terminal it is a bar on
    stderr; elsewhere, lines on stderr once the command has run ``FIRST_LINE_S`` seconds
    (``progress_lines``); nothing when ``quiet`` (``--json``). ``total`` None: not known yet.
    """
    console = Console(stderr=True)
    if quiet:
        yield lambda done=None, total=None, detail=None: None
        return
    if not console.is_terminal:
        with progress_lines(description, total) as update:
            yield update
        return
    with Progress(
        TextColumn(f"[bold]{description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[detail]}"),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total, detail="")

        def update(done: int | None = None, total: int | None = None, detail: str | None = None):
            changes: dict[str, object] = {"completed": done, "total": total, "detail": detail}
            bar.update(task, **{k: v for k, v in changes.items() if v is not None})

        yield update


@contextmanager
def progress_lines(description: str, total: int | None) -> Iterator[Callable[..., None]]:
    """``progress`` where stderr is no terminal: a thread prints ``headlab: DESCRIPTION
    DONE/TOTAL, N s`` after ``FIRST_LINE_S`` seconds and every ``EVERY_S`` seconds after,
    and a last line ending in ``, done`` if it printed anything and the work ended without an
    error (an error prints its own line)."""
    state: dict[str, object] = {"done": 0, "total": total, "detail": ""}
    start = time.monotonic()
    stop = threading.Event()
    printed = threading.Event()

    def line(end: str = "") -> str:
        known = state["total"] is not None
        count = f"{state['done']}/{state['total']}" if known else (state["done"] or "")
        detail = f" {state['detail']}" if state["detail"] else ""
        head = f"headlab: {description} {count}".rstrip()
        return f"{head}{detail}, {time.monotonic() - start:.0f} s{end}"

    def tick() -> None:
        wait = first_line_s()
        while not stop.wait(wait):
            print(line(), file=sys.stderr, flush=True)
            printed.set()
            wait = EVERY_S

    def update(done: int | None = None, total: int | None = None, detail: str | None = None):
        changes = {"done": done, "total": total, "detail": detail}
        state.update({k: v for k, v in changes.items() if v is not None})

    thread = threading.Thread(target=tick, name="headlab progress", daemon=True)
    thread.start()
    try:
        yield update
    finally:
        stop.set()
        thread.join()
    if printed.is_set():
        print(line(end=", done"), file=sys.stderr, flush=True)

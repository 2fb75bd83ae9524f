"""A progress bar on stderr for long commands: shown only on a terminal and never with --json."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress(
    description: str, total: int | None, *, quiet: bool = False
) -> Iterator[Callable[..., None]]:
    """Yield ``update(done=None, total=None, detail=None)``: a library's ``on_step(done, total)``
    as it is, and ``detail`` a short text shown after the bar (the sweep's current run and loss).

    The bar, on stderr, says ``description`` (what the command is doing, in words); it is drawn
    only when stderr is a terminal and not ``quiet`` (``--json``). ``total`` None: not known yet.
    """
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield lambda done=None, total=None, detail=None: None
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

"""A progress bar on stderr for long commands: shown only on a terminal and never with --json."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress(description: str, total: int, *, quiet: bool = False) -> Iterator[Callable[..., None]]:
    """Yield ``update(done, total=None)`` (a library's ``on_step(done, total)`` as it is); a
    rich bar on stderr when it is a terminal and not ``quiet``."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield lambda done, total=None: None
        return
    with Progress(
        TextColumn(f"[bold]{description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done, total=None: bar.update(task, completed=done, total=total)

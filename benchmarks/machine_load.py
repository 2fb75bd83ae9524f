"""A busy machine for the benchmarks: one competing CPU-bound process, bounded and stopped.

Users run headlab beside other work. There, fine-grained parallel work falls behind: every small
op is an OpenMP region of all of torch's threads, and each region ends in a barrier that waits
for the thread another process descheduled, while a few large ops barely move (issue 24).

``--load busy`` measures while one other CPU-bound process runs: a single-threaded Python loop
started here, stopped at the end of the measurement, and stopping by itself after ``bound_s``
seconds or as soon as the process that started it is gone (killed before it could stop it).
``--load both`` measures quiet, then busy, in one run, so that each benchmark reports its ratios
against its baseline within the same load. A benchmark that measures in fresh child processes
(``fresh_process.run_child``) keeps the competitor running across each child.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

LOADS = ("quiet", "busy")
CHOICES = (*LOADS, "both")
#: The most a competitor runs when nothing stops it (a benchmark stops it far earlier).
BOUND_S = 3600.0

# The competitor: spins until its bound, or until its parent is gone (it is then re-parented).
BUSY = "\n".join(
    [
        "import os, sys, time",
        "end = time.monotonic() + float(sys.argv[1])",
        "parent = int(sys.argv[2])",
        "x = 0",
        "while time.monotonic() < end and os.getppid() == parent:",
        "    for i in range(10**5):",
        "        x += i * i",
    ]
)


def add_load_argument(parser: argparse.ArgumentParser) -> None:
    """The benchmarks' ``--load quiet|busy|both`` (default quiet)."""
    parser.add_argument(
        "--load",
        choices=CHOICES,
        default="quiet",
        help="measure as the machine is, with one competing CPU-bound process, or both",
    )


def loads(choice: str) -> tuple[str, ...]:
    """The loads that ``--load choice`` measures, in order."""
    if choice not in CHOICES:
        raise ValueError(f"load must be one of {', '.join(CHOICES)}, got {choice!r}")
    return LOADS if choice == "both" else (choice,)


@contextmanager
def competing(load: str, bound_s: float = BOUND_S) -> Iterator[subprocess.Popen | None]:
    """Within the block, one other CPU-bound process runs when ``load`` is "busy" (the block
    gets its Popen; None when quiet). It is stopped when the block ends."""
    if load not in LOADS:
        raise ValueError(f"load must be one of {', '.join(LOADS)}, got {load!r}")
    if load == "quiet":
        yield None
        return
    process = subprocess.Popen([sys.executable, "-c", BUSY, str(bound_s), str(os.getpid())])
    try:
        time.sleep(0.5)  # let it start spinning
        yield process
    finally:
        process.terminate()
        process.wait(timeout=10)


def load_average() -> float:
    """The machine's one-minute load average (what each benchmark prints beside its numbers)."""
    return os.getloadavg()[0]

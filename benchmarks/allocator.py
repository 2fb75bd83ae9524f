"""The C allocator for the benchmarks: as a user's process has it, or held steady; page faults.

Side by side in one process, one implementation's frees can decide another's speed: glibc
hands large freed blocks back to the system (``munmap``, or trimming the top of its heap), and
the next call that asks for memory touches fresh pages, each a page fault (about 1 to 2.5 us on
this Firecracker VM). Which call pays depends on the order of the calls and on how much the one
before freed: at batch 8 x 256 (docs/benchmarks.md) calls of torch's and headlab's default
paths faulted from 0 to 8,600 pages each, 5 to 25% of a call, depending on their order.

``--allocator steady`` (glibc's ``mallopt``: a fixed 32 MiB mmap threshold, a 1 GiB trim
threshold) keeps freed memory in the process, so that every call computes on pages it already
has; allocations above 32 MiB are still mapped afresh each time (torch's 192 MiB of weights at
1 x 2048 tokens). ``page_faults`` counts the minor faults of this process, for a column that
shows which calls paid.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import resource

CHOICES = ("default", "steady")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allocator",
        choices=CHOICES,
        default="default",
        help="steady: glibc keeps freed memory (no page faults from another "
        "implementation's frees)",
    )


def hold_steady() -> None:
    """glibc: keep freed memory in the process (no trimming, a fixed mmap threshold)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None or not (
        mallopt(M_MMAP_THRESHOLD, 32 * 2**20) and mallopt(M_TRIM_THRESHOLD, 2**30)
    ):
        raise SystemExit("--allocator steady needs glibc's mallopt; this C library has none")


def use(choice: str) -> None:
    if choice == "steady":
        hold_steady()


def page_faults() -> int:
    """Minor page faults of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

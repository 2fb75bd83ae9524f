"""Giving memory that torch has freed back to the system, where glibc would keep it.

The chunked kernel (``attention.chunked``) allocates and frees a few tensors of up to
``chunk_elements`` floats per chunk of query rows, hundreds of times per layer, between the
layer's own activations. glibc's mmap threshold rises to the size of the largest block freed
(up to 32 MiB), so after the first chunk these come from the heap, and what they free there
stays resident: glibc gives back only the top of its heap, and a live block above the free
ones holds them. On SmolLM2 at 8192 tokens (``model heads``) the heap held 0.7 GiB of freed
memory after the forward, resident while the logits were computed next (measured with
glibc's ``mallinfo2``, docs/benchmarks.md).

``return_freed_memory`` asks glibc to return it (``malloc_trim(0)``: every free page of
every arena, not only the top). The memory stays in the process's address space; the next
allocations that reuse it fault its pages in again, so returning costs time: after every chunk
it would cost what setting ``MALLOC_MMAP_THRESHOLD_`` low costs (twice the time, measured).
``ResidentBudget`` returns it only once the resident set has grown by a budget since it last
did: between layers, the freed memory a layer leaves piles up to at most the budget, and a
layer that leaves little costs nothing. Elsewhere (macOS, musl, Windows) it does
nothing: their allocators are not glibc's, and none of this was measured there.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` of this process, None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the symbols the process has loaded, its C library's among them
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)  # glibc's own extension: musl has none
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def resident_bytes() -> int | None:
    """This process's resident set in bytes (Linux's /proc/self/statm), None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * _page_size()


@functools.cache
def _page_size() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE")


class ResidentBudget:
    """Returns freed memory (``return_freed_memory``) when ``check`` finds the resident set
    more than ``budget`` bytes above where the first ``check`` found it.

    Call ``check`` at the same point of each round of a repeated work (after each layer): the
    first round's working set is then in the floor, and what the rounds after leave behind
    (freed memory the heap cannot reuse, piling up) is what the budget bounds. After a return
    the next round takes its working set again (page faults), so a budget below what a round
    leaves would return after every round. Live memory that grows by more than the budget
    (a caller keeping each round's output) also triggers every check."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.floor: int | None = None
        self.returns = 0  # how many times it returned memory

    def check(self) -> bool:
        """Return freed memory if the resident set is over the budget; True if it did."""
        now = resident_bytes()
        if now is None:
            return False
        if self.floor is None:
            self.floor = now
            return False
        if now - self.floor <= self.budget or not return_freed_memory():
            return False
        self.returns += 1
        return True


def return_freed_memory() -> bool:
    """Return the C heap's free pages to the system (glibc ``malloc_trim(0)``). True where it
    ran (Linux with glibc), False where this allocator has no such call (nothing is done)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True

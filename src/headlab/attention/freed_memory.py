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
allocations that reuse it fault its pages in again, which is why this runs after a forward,
not after every chunk (after every chunk it would cost what setting ``MALLOC_MMAP_THRESHOLD_``
low costs: twice the time, measured). Elsewhere (macOS, musl, Windows) it does
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


def return_freed_memory() -> bool:
    """Return the C heap's free pages to the system (glibc ``malloc_trim(0)``). True where it
    ran (Linux with glibc), False where this allocator has no such call (nothing is done)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True

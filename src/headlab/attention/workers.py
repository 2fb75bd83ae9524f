"""Independent blocks of one kernel call, spread over worker threads that each run single-threaded.

The kernel's blocked loop (weights averaged over heads, without autograd) computes a few dozen
cache-sized blocks of query rows per call, about five ATen ops each. Run one after the other,
every op is an OpenMP parallel region of all of torch's threads, and every region ends in a
barrier: on a machine where another process holds a core, each barrier waits for the thread
that was descheduled, and a call of 1 x 2048 tokens (160 regions) fell to 0.2-0.3x torch's
speed. Here each worker thread runs its ops on one thread (no region, no barrier) and takes the
next block when it is done with one, so a slowed thread simply takes fewer blocks.

Workers: ``torch.get_num_threads()`` of the calling thread (the pool is rebuilt when that changes,
and in a forked child). Each worker sets its own thread count to 1 (``torch.set_num_threads`` sets
the calling thread's OpenMP and MKL counts, and a process-wide default for threads that start
using torch later, which is put back at once). Only with torch's OpenMP backend (the others
have one process-wide pool) and outside autocast (thread-local); else the blocks run in order.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

J = TypeVar("J")

_lock = threading.Lock()
_pool: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, workers, pool)


def _single_threaded() -> None:
    torch.get_num_threads()  # torch's per-thread initialisation first, from the default
    torch.set_num_threads(1)


def _workers(count: int) -> ThreadPoolExecutor:
    """The pool of ``count`` single-threaded workers of this process, started once."""
    global _pool
    with _lock:
        if _pool is not None and _pool[:2] == (os.getpid(), count):
            return _pool[2]
        if _pool is not None and _pool[0] == os.getpid():
            _pool[2].shutdown(wait=False)
        pool = ThreadPoolExecutor(count, "headlab-block", initializer=_single_threaded)
        started = threading.Barrier(count + 1)
        waits = [pool.submit(started.wait) for _ in range(count)]  # every worker initialised
        started.wait()
        for wait in waits:
            wait.result()
        torch.set_num_threads(count)  # the process-wide default back (this thread's count)
        _pool = (os.getpid(), count, pool)
        return pool


@functools.cache
def _openmp() -> bool:
    """torch's intra-op threads are OpenMP's: a thread's count is its own."""
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


def run_blocks(jobs: Sequence[J], block: Callable[[J], None]) -> None:
    """``block(job)`` for every job (blocks of one call, writing disjoint parts of its
    outputs), on the workers where they pay, else in order in this thread. The workers run
    with this thread's grad and inference mode."""
    count = torch.get_num_threads()
    if count < 2 or len(jobs) < 2 * count or not _openmp() or torch.is_autocast_enabled("cpu"):
        for job in jobs:
            block(job)
        return
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def run(job: J) -> None:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            block(job)

    for _ in _workers(count).map(run, jobs):
        pass

"""Independent blocks of one kernel call, spread over worker threads that each run single-threaded.

The kernel's blocked loop (weights averaged over heads, without autograd) computes a few dozen
cache-sized blocks of query rows per call, about five ATen ops each; its chunked loop (streamed
statistics, and what SDPA cannot serve) a chunk of rows at a time, about 90 ops each with the
statistics (27,000 per SmolLM2 forward at 2048 tokens, against 1,600 for its plain forward).
Run one after the other, every op is an OpenMP parallel region of all of torch's threads, and
every region ends in a barrier: on a machine where another process holds a core, each barrier
waits for the thread that was descheduled, and a call of 1 x 2048 tokens (160 regions) fell to
0.2-0.3x torch's speed. Here each worker thread runs its ops on one thread (no region, no
barrier) and takes the next block when it is done with one, so a slowed thread simply takes
fewer blocks. Results that must add up in one order (the statistics' sums) are merged in the
calling thread in the order of the blocks, so they do not depend on which worker ran what.

On an idle machine the workers lose to torch's own threads (measured, 2 cores: the default
path at batch 8 x 256 took 39.8 ms on the workers and 33 ms in order, torch 34 ms; the OpenMP
thread that the caller's last parallel region left spinning holds a core the workers want), so
the blocks go to the workers only while another process is runnable (``competing``, read from
/proc on Linux, at most every 0.1 s; elsewhere the workers always take them).

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
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

import torch

J = TypeVar("J")
R = TypeVar("R")
#: With ``merge``: blocks each worker may run ahead of the oldest block not yet merged.
AHEAD = 4

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


#: How long ``competing`` trusts its last reading (seconds).
RECHECK_S = 0.1
_last_check: tuple[float, bool] | None = None  # (time.monotonic(), competing)


def _running_elsewhere() -> bool:
    """Whether a thread of another process is runnable now (Linux): the system's runnable
    count (/proc/loadavg) above this process's threads in state R. True where /proc is not
    there to read: the workers are the safe choice."""
    try:
        with open("/proc/loadavg") as f:
            runnable = int(f.read().split()[3].split("/")[0])
        own = 0
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            own += stat[stat.rindex(")") + 2] == "R"
    except (OSError, ValueError, IndexError):
        return True
    return runnable > own


def competing() -> bool:
    """Whether another process competes for the cores now (``_running_elsewhere``, read at
    most every RECHECK_S seconds)."""
    global _last_check
    now = time.monotonic()
    if _last_check is None or now - _last_check[0] > RECHECK_S:
        _last_check = (now, _running_elsewhere())
    return _last_check[1]


def usable() -> int:
    """How many workers ``run_blocks`` spreads blocks over in this thread now (1: none, the
    blocks run in order here): this thread's torch thread count, with OpenMP, outside autocast,
    while another process competes. A caller that sizes its blocks for memory divides its
    budget by this and passes it on to ``run_blocks``."""
    count = torch.get_num_threads()
    if count < 2 or not _openmp() or torch.is_autocast_enabled("cpu") or not competing():
        return 1
    return count


def run_blocks(
    jobs: Sequence[J],
    block: Callable[[J], R],
    merge: Callable[[R], None] | None = None,
    count: int | None = None,
) -> None:
    """``block(job)`` for every job (blocks of one call, writing disjoint parts of its
    outputs), on the workers where they pay (``count`` workers, default ``usable()``, at
    least two blocks each), else in order in this thread. The workers run with this thread's
    grad and inference mode.

    ``merge``: called in this thread with each block's result, in the order of ``jobs`` (sums
    that must add up in one order, whatever thread computed each part); the workers then run
    at most AHEAD blocks each ahead of the oldest one not merged, so that results waiting for
    it do not pile up. A block's error reaches the caller once the blocks started are done."""
    count = usable() if count is None else count
    if count < 2 or len(jobs) < 2 * count:
        for job in jobs:
            result = block(job)
            if merge is not None:
                merge(result)
        return
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def run(job: J) -> R:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return block(job)

    pool = _workers(count)
    window = len(jobs) if merge is None else AHEAD * count
    pending: deque[Future[R]] = deque()
    # This thread merges on one thread too: its ops would otherwise be parallel regions whose
    # barriers wait for cores the workers hold (measured: merging SmolLM2's statistics at 8192
    # tokens took 0.8 s of a 3.4 s layer this way; the layer took 2.0 s in order in this thread).
    torch.set_num_threads(1)
    try:
        for job in jobs:
            pending.append(pool.submit(run, job))
            if len(pending) >= window:
                _take(pending.popleft(), merge)
        while pending:
            _take(pending.popleft(), merge)
    finally:  # after an error: nothing new starts, and nothing still writes when it returns
        for future in pending:
            future.cancel()
        wait(pending)
        torch.set_num_threads(count)


def _take(future: Future[R], merge: Callable[[R], None] | None) -> None:
    result = future.result()
    if merge is not None:
        merge(result)

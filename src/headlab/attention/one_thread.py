"""torch on one thread for a block of small-tensor work, the caller's count put back after.

Small matrices (the seed questions' 8 x 16 set-ups, the toy models of the sweeps) spend their
time in OpenMP barriers, not arithmetic: each op is a parallel region of every torch thread, and
while another process holds a core each region waits for the descheduled thread. Measured on the
2-core machine (``benchmarks/bench_report_threads.py --load both``, docs/benchmarks.md): with one
competing process the report's seed scenarios took 3.5 s on torch's 2 threads and 0.83 s on one
(MiniLM's attention on 256 tokens 1.10 s and 0.15 s); on the idle machine one thread was slower
(0.83 s against 0.58 s; 0.14 s against 0.09 s). ``when_busy`` takes one thread only while
another process competes for the cores (``workers.competing``, read from /proc).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def one_torch_thread(when_busy: bool = False) -> Iterator[None]:
    """``torch.set_num_threads(1)`` inside (with ``when_busy``: only while another process
    competes for the cores); the previous count restored on exit (errors too)."""
    from headlab.attention.workers import competing

    if when_busy and not competing():
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)

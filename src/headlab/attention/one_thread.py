"""torch on one thread for a block of small-tensor work, the caller's count put back after.

Small matrices (the seed questions' 8 x 16 set-ups, the toy models of the sweeps) spend their
time in OpenMP barriers, not arithmetic: each op is a parallel region of every torch thread, and
while another process holds a core each region waits for the descheduled thread. Measured on the
2-core machine with other work running: the report's seed scenarios took 5.3-12.7 s on torch's 2
threads and 1.0-1.1 s on one (docs/benchmarks.md, report).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """``torch.set_num_threads(1)`` inside; the previous count restored on exit (errors too)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)

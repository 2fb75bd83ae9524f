"""One measured call in a fresh process: its time and its peak memory, loading excluded.

A benchmark's parent runs each (route, length) as ``python script.py --child ...`` one after the
other, so that each peak is its own; the child calls ``measure`` and prints ``json.dumps`` of its
row as its last line, and the parent reads it back with ``run_child``.

Peak memory: on the CPU the process's peak resident set during the call (VmHWM, reset just before
it through /proc/self/clear_refs, so the peak of loading the model does not count) and its
resident set just before the call (the weights and the interpreter); on a GPU torch's peak
allocated memory and the memory allocated before the call.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable


def status_bytes(field: str) -> int:
    """A memory field of /proc/self/status in bytes (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(fn: Callable, x, device: str = "cpu") -> dict:
    """{"seconds", "cpu_seconds", "before", "peak"} of one call ``fn(x)`` (bytes; warm ``fn`` up
    first). cpu_seconds is the process's CPU time (all threads): on cores shared with other work
    it moves less than the wall time. The result is dropped before the peak is read."""
    import torch

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        before = status_bytes("VmRSS")
    start, cpu = time.perf_counter(), time.process_time()
    result = fn(x)
    if cuda:
        torch.cuda.synchronize()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    del result
    peak = torch.cuda.max_memory_allocated() if cuda else status_bytes("VmHWM")
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "before": before, "peak": peak}


def failure_line(stderr: str, returncode: int) -> str:
    """The last line of a failed child's stderr (its exception, for a traceback), at most 240
    characters; the exit code when it printed nothing (killed: -9 is the kernel's OOM killer)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return f"exit code {returncode}, nothing on stderr"
    last = lines[-1]
    return last if len(last) <= 240 else last[:237] + "..."


def run_child(command: list[str]) -> tuple[dict | None, str]:
    """Run ``command``; (the JSON object on its last stdout line, "") or (None, one line why)."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        return None, failure_line(done.stderr, done.returncode)
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]), ""
    except (IndexError, json.JSONDecodeError):
        return None, f"no JSON result on stdout ({failure_line(done.stderr, 0)})"

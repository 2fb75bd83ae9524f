"""Where the memory of ``model heads`` is, layer by layer, and what returning freed memory costs.

    PYTHONPATH=src:benchmarks python benchmarks/heads_memory.py --threads 2 --length 8192

One fresh process per run (``fresh_process``), one after the other: ``sdpa-body`` (transformers'
own SDPA forward of SmolLM2's body, no logits: issue 30's baseline) and the ``heads`` route of
``long_context_routes`` (what ``model heads`` runs: every statistic and role score, the logits a
block of positions at a time) with the C heap's freed memory returned (``attention.freed_memory``)

  budget   as headlab does: between layers past ``FREED_BUDGET``, and after the forward
  final    only after the forward
  never    not at all (glibc keeps what the statistics' chunks freed)
  every    after every layer and after the forward (a budget of 0)

Each run prints its peak resident set (VmHWM, reset before the call), time, CPU and system
seconds, minor page faults (what a return costs: the pages taken again), and a timeline: after
every fifth layer and at the first logits block, the resident set, the peak so far and glibc's
heap (``mallinfo2``: arena size, mapped blocks, bytes in use, bytes free), all in MiB.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import sys
import time

from fresh_process import run_child, status_bytes
from machine_load import load_average

RUNS = ("sdpa-body", "budget", "never", "final", "every")
#: ``mallinfo2``'s fields (glibc >= 2.33), all size_t.
MALLINFO2 = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO2]


def _heap():
    """fn() -> (arena, mapped, in use, free) bytes of glibc's heap, or None without mallinfo2."""
    try:
        info = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    info.restype = _Mallinfo2

    def read() -> tuple[int, int, int, int]:
        m = info()
        return m.arena, m.hblkhd, m.uordblks, m.fordblks

    return read


def _child(run: str, length: int) -> dict:
    import torch

    import headlab.attention.freed_memory as freed_memory
    import headlab.heads.model_head_sums as head_sums
    import headlab.models.output_rows as output_rows
    from long_context_routes import Spec, route_runs

    heap = _heap()
    marks: list[dict] = []

    def mark(tag: str) -> None:
        row = {"tag": tag, "rss": status_bytes("VmRSS"), "hwm": status_bytes("VmHWM")}
        if heap is not None:
            row.update(zip(("arena", "mapped", "in_use", "free"), heap(), strict=True))
        marks.append(row)

    if run == "never":
        head_sums.return_freed_memory = freed_memory.return_freed_memory = lambda: False
    elif run in ("final", "every"):
        head_sums.FREED_BUDGET = 2**62 if run == "final" else 0
    route = "sdpa-body" if run == "sdpa-body" else "heads"
    sums, scores = head_sums.model_head_sums, output_rows.next_token_scores

    def observed_sums(*args, **kwargs):
        kwargs["on_layer"] = lambda i: i % 5 == 0 and mark(f"layer {i}")
        return sums(*args, **kwargs)

    class ObservedRows:
        def __init__(self, rows) -> None:
            self.rows, self.num_positions = rows, rows.num_positions

        def logits(self, block: slice):
            if block.start == 0:
                mark("logits 0")
            return self.rows.logits(block)

    head_sums.model_head_sums = observed_sums
    output_rows.next_token_scores = lambda out, ids, rows=None: scores(ObservedRows(out), ids, rows)
    fn, x, warm = route_runs(route, Spec(), length)
    with torch.inference_mode():
        fn(warm)
        marks.clear()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM from here
        mark("before")
        usage, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        result = fn(x)
        seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        del result
    mark("end")
    return {
        "run": run,
        "seconds": seconds,
        "user": after.ru_utime - usage.ru_utime,
        "system": after.ru_stime - usage.ru_stime,
        "faults": after.ru_minflt - usage.ru_minflt,
        "before": marks[0]["rss"],
        "peak": marks[-1]["hwm"],
        "marks": marks,
    }


def _timeline(row: dict) -> list[str]:
    mib = 2**20
    lines = [
        f"  {'at':10s} {'rss':>6s} {'peak':>6s} {'arena':>6s} {'mapped':>6s} "
        f"{'in use':>6s} {'free':>6s}"
    ]
    for m in row["marks"]:
        heap = [m.get(k) for k in ("arena", "mapped", "in_use", "free")]
        cells = [m["rss"], m["hwm"], *heap]
        lines.append(
            f"  {m['tag']:10s} "
            + " ".join("     -" if v is None else f"{v / mib:6.0f}" for v in cells)
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(_child(args.child, args.length)))
        return
    rows, loads = [], [load_average()]
    for run in args.runs:
        command = [sys.executable, __file__, "--child", run, "--length", str(args.length)]
        row, why = run_child(command + (["--threads", str(args.threads)] if args.threads else []))
        loads.append(load_average())
        if row is None:
            print(f"{run}: failed: {why}", flush=True)
            continue
        rows.append(row)
        print(
            f"{run} at {args.length}: {row['seconds']:.1f} s, peak {row['peak'] / 2**30:.2f} GiB",
            flush=True,
        )
        print("\n".join(_timeline(row)), flush=True)
    base = next((r for r in rows if r["run"] == "sdpa-body"), None)
    timed = next((r for r in rows if r["run"] == "never"), None)
    print(
        f"\nSmolLM2 at {args.length} tokens; {platform.machine()}, {os.cpu_count()} cores; "
        f"load average {min(loads):.1f} to {max(loads):.1f}"
    )
    print(
        "| run | seconds | user s | system s | page faults | peak GiB | peak / sdpa-body "
        "| time / never |"
    )
    print("| --- " * 8 + "|")
    for r in rows:
        ratio = f"{r['peak'] / base['peak']:.2f}" if base else "-"
        headlab_run = timed is not None and r["run"] != "sdpa-body"
        slower = f"{r['seconds'] / timed['seconds']:.2f}" if headlab_run else "-"
        print(
            f"| {r['run']} | {r['seconds']:.1f} | {r['user']:.1f} | {r['system']:.1f} | "
            f"{r['faults']} | {r['peak'] / 2**30:.2f} | {ratio} | {slower} |"
        )


if __name__ == "__main__":
    main()

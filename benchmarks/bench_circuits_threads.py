"""The circuits commands' work on torch's threads against one thread, wall and CPU time.

    PYTHONPATH=src python benchmarks/bench_circuits_threads.py [--repeats 3] [--load both]
        [--methods composition eap] [--pairs 2] [--length 12]

What ``headlab circuits --model smollm2`` computes after the load: ``run_circuits`` of
--method composition (every head pair's Q-, K-, V-composition and the random baselines: small
float64 matrices, the weights only) and of --method eap (the clean and corrupted runs and one
gradient run of the induction pairs, then every edge's score). Each runs on torch's own threads
(``one_torch_thread`` turned off) and as headlab runs it (each stage inside
``one_torch_thread(when_busy=True)``: one thread while another process competes), alternating
round by round. Wall time alone says little on a shared machine; CPU time (this process's user +
system, ``time.process_time``) says how much of it threads spent spinning in OpenMP barriers.
``--load busy`` adds one competing CPU-bound process (``machine_load.competing``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

import headlab.circuits.run as circuits_run
from headlab.attention.one_thread import one_torch_thread
from headlab.circuits.tasks import TaskRequest
from headlab.models import load
from machine_load import add_load_argument, competing, load_average, loads

WAYS = ("torch's threads", "headlab (one when busy)")


def _on(way: str, work):
    def run():
        if way == WAYS[0]:
            circuits_run.one_torch_thread = lambda **_: contextlib.nullcontext()
        try:
            return work()
        finally:
            circuits_run.one_torch_thread = one_torch_thread

    return run


def _measure(runs: dict, repeats: int) -> dict[str, tuple[list[float], list[float]]]:
    """way -> (wall seconds, CPU seconds) of ``repeats`` interleaved rounds."""
    times = {way: ([], []) for way in runs}
    for round_ in range(repeats):
        order = list(runs.items())
        for way, run in order if round_ % 2 == 0 else reversed(order):
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            times[way][0].append(time.perf_counter() - wall)
            times[way][1].append(time.process_time() - cpu)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", nargs="*", default=["composition", "eap"])
    parser.add_argument("--pairs", type=int, default=2, help="induction pairs (eap)")
    parser.add_argument("--length", type=int, default=12, help="tokens repeated (eap)")
    add_load_argument(parser)
    args = parser.parse_args(argv)
    model = load("smollm2")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch threads {torch.get_num_threads()}, torch {torch.__version__}"
    )
    print(
        "| method | load (load average before, after) | way | median wall s | "
        "median CPU s | CPU / wall |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for method in args.methods:
        task = TaskRequest("induction", n_pairs=args.pairs, length=args.length)
        request = circuits_run.CircuitRequest(task, method=method)
        prepared = circuits_run.prepare(model, request)

        def work(p=prepared):
            return circuits_run.run_circuits(model, p)

        runs = {way: _on(way, work) for way in WAYS}
        for load_ in loads(args.load):
            with competing(load_):
                before = load_average()
                times = _measure(runs, args.repeats)
                seen = f"{load_} ({before:.1f}, {load_average():.1f})"
            for way, (wall, cpu) in times.items():
                w, c = statistics.median(wall), statistics.median(cpu)
                print(
                    f"| {method} | {seen} | {way} | {w:.1f} | {c:.1f} | {c / w:.2f} |", flush=True
                )


if __name__ == "__main__":
    main()

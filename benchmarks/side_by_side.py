"""Timing implementations side by side: every one once per round, and their ratios per load.

``interleaved`` calls every implementation once per round, every other round in reverse order,
so that a change of machine load during the run hits all of them alike and none always runs on
the caches and the clock its one neighbour left. ``load_table`` reports each implementation's
median against a baseline measured under the same load (``machine_load``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from allocator import page_faults


def time_calls(fn: Callable[[], object], repeats: int, warmup: int) -> list[float]:
    """Milliseconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def interleaved(
    steps: dict[str, Callable[[], object]],
    repeats: int,
    warmup: int,
    faults: dict[str, list[int]] | None = None,
) -> dict[str, list[float]]:
    """name -> times (ms) of ``repeats`` rounds, after ``warmup`` calls of each step;
    ``faults``, if given, gets name -> the page faults of each timed call."""
    for step in steps.values():
        time_calls(step, 0, warmup)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_ in range(repeats):
        order = list(steps.items())
        for name, step in order if round_ % 2 == 0 else reversed(order):
            if faults is None:
                times[name] += time_calls(step, 1, 0)
                continue
            before = page_faults()
            times[name] += time_calls(step, 1, 0)
            faults.setdefault(name, []).append(page_faults() - before)
    return times


def interleaved_cpu(
    sides: dict[str, Callable[[], object]],
    rounds: int,
    found: dict[str, object],
    after_first: Callable[[], None] = lambda: None,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(cpu, wall): name -> seconds of each of ``rounds`` rounds, every side once per round,
    every other round in reverse order, each timed by the process' CPU time and the wall clock
    and printed with the load average; ``found`` gets each side's last result, and
    ``after_first`` runs once the first round has (to compare the results)."""
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    wall: dict[str, list[float]] = {side: [] for side in sides}
    for round_ in range(rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for side in order:
            started, used = time.perf_counter(), time.process_time()
            found[side] = sides[side]()
            cpu[side].append(time.process_time() - used)
            wall[side].append(time.perf_counter() - started)
            print(
                f"  round {round_ + 1}, {side}: CPU {cpu[side][-1]:.1f} s, wall "
                f"{wall[side][-1]:.1f} s (load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        if round_ == 0:
            after_first()
    return cpu, wall


def load_table(
    medians: dict[tuple[str, str], float], baseline: str, work: int, unit: str
) -> list[str]:
    """Markdown lines: one row per (load, implementation) of ``medians`` (ms), with ``work``
    ``unit``s per call as a rate and ratio = the baseline's median / this one's under the same
    load (> 1: faster than the baseline)."""
    lines = [
        f"| load | implementation | median ms | {unit}/s | ratio |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (load, name), ms in medians.items():
        ratio = medians[(load, baseline)] / ms
        lines.append(f"| {load} | {name} | {ms:.0f} | {work / ms * 1e3:.1f} | {ratio:.2f}x |")
    return lines


def medians_per_load(
    steps: dict[str, Callable[[], object]], choice: str, repeats: int, warmup: int = 1
) -> tuple[dict[tuple[str, str], float], list[str]]:
    """(load, name) -> median ms of ``interleaved`` for every load of ``--load choice`` (busy:
    one competing process, ``machine_load.competing``), and a line per load of the load average
    before and after it, for the printed header."""
    import statistics

    from machine_load import competing, load_average, loads

    medians: dict[tuple[str, str], float] = {}
    seen = []
    for load in loads(choice):
        with competing(load):
            before = load_average()
            times = interleaved(steps, repeats, warmup)
            seen.append(f"{load} {before:.1f} to {load_average():.1f}")
        medians |= {(load, name): statistics.median(t) for name, t in times.items()}
    return medians, seen

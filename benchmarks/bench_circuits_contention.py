"""The ``headlab circuits`` command as a user runs it, quiet and with a competitor on each core.

    PYTHONPATH=src python benchmarks/bench_circuits_contention.py [--methods composition eap]
        [--rounds 2] [--load both] [--competitors 2] [--extra ARG ...]

Each round runs ``python -m headlab circuits --model smollm2 --method M --force --out TMP`` as a
child process, once per method (the methods in turn, every other round in reverse order), and
reads its wall time and its CPU time (the child's user + system time, every thread, from
``os.wait4``). ``--load busy`` runs the rounds while ``--competitors`` CPU-bound processes spin
(``machine_load.competing``, one per core by default); ``--load both`` runs quiet, then busy, in
one run. CPU time that rises with the load, at the same work, is time threads spent spinning in
barriers while they waited for a descheduled thread; wall time also counts the competitors' share
of the cores, which no code can take back (with one competitor per core, about twice the quiet
wall time is the floor).

Prints one Markdown table: per load and method the median wall and CPU seconds, the CPU share
(CPU / wall) and the busy / quiet ratios, and the load averages seen before and after each load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine_load import add_load_argument, competing, load_average, loads

ROOT = Path(__file__).resolve().parents[1]


def run_command(method: str, out: Path, extra: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one ``headlab circuits --method method``."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    command = [
        sys.executable,
        "-m",
        "headlab",
        "circuits",
        "--model",
        "smollm2",
        "--method",
        method,
        "--force",
        "--out",
        str(out),
        *extra,
    ]
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {child.returncode}: {stderr[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(methods: list[str], rounds: int, extra: list[str], folder: Path) -> dict:
    """method -> ([wall s], [CPU s]) over ``rounds`` interleaved rounds."""
    times: dict[str, tuple[list[float], list[float]]] = {m: ([], []) for m in methods}
    for round_ in range(rounds):
        for method in methods if round_ % 2 == 0 else list(reversed(methods)):
            wall, cpu = run_command(method, folder / f"{method}.json", extra)
            times[method][0].append(wall)
            times[method][1].append(cpu)
            print(
                f"  round {round_ + 1} {method}: wall {wall:.1f} s, CPU {cpu:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="*", default=["composition", "eap"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--competitors",
        type=int,
        default=os.cpu_count() or 1,
        help="competing processes under --load busy (default: one per core)",
    )
    parser.add_argument("--extra", nargs="*", default=[], help="more circuits options")
    add_load_argument(parser)
    args = parser.parse_args(argv)
    medians: dict[tuple[str, str], tuple[float, float]] = {}
    print(
        "| load (load average before, after) | method | median wall s | median CPU s | "
        "CPU / wall | wall / quiet | CPU / quiet |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for load_ in loads(args.load):
            with contextlib.ExitStack() as stack:
                for _ in range(args.competitors if load_ == "busy" else 1):
                    stack.enter_context(competing(load_))
                before = load_average()
                times = measure(args.methods, args.rounds, args.extra, Path(tmp))
                seen = f"{load_} ({before:.1f}, {load_average():.1f})"
            for method, (wall, cpu) in times.items():
                w, c = statistics.median(wall), statistics.median(cpu)
                medians[(load_, method)] = (w, c)
                quiet = medians.get(("quiet", method))
                ratios = f"{w / quiet[0]:.2f} | {c / quiet[1]:.2f}" if quiet else " | "
                print(
                    f"| {seen} | {method} | {w:.1f} | {c:.1f} | {c / w:.2f} | {ratios} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()

"""This tree against an earlier commit, side by side in one run: is a change free of slowdowns?

    PYTHONPATH=src python benchmarks/versus_commit.py 52b881b --rounds 3 --threads 2 [--load both]

``--load`` and ``--allocator`` are passed on (``--allocator`` to the attention benchmark only).

Each round runs, for both sides in turn (every other round in reverse order, so that neither
always runs first), the attention benchmark (``bench_attention.py`` of this tree with the side's
``src`` first on PYTHONPATH: it uses only ``headlab.MultiHeadAttention``, whose API is old) and
the long-context benchmark (each side's own ``bench_long_context.py``, whose harness changed
with the code; both measure the same routes, SmolLM2's shapes with random weights, the model's
forward and every head's statistics). The earlier commit is checked out in a temporary git
worktree, removed at the end. The table gives, per measured row, the median over the rounds of
each side and the ratio this tree / the commit (time: < 1 is faster now; memory likewise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import allocator
from machine_load import add_load_argument

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _run(command: list[str], src: Path, out: Path) -> dict:
    """One benchmark process with ``src`` first on the path; its --json-out document."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [*command, "--json-out", str(out)], env=env, check=False, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return json.loads(out.read_text())


def attention_rows(document: dict) -> dict[str, float]:
    """'size | mode | implementation' -> median ms, from bench_attention's JSON."""
    return {
        f"{r['size']} | {r['mode']} | {r['impl']}": r["median_ms"]
        for r in document["results"]
        if "headlab" in r["impl"]
    }


def long_context_rows(document: dict) -> dict[str, float]:
    """'length | route | seconds' and '... | peak GiB' -> value, from bench_long_context's JSON."""
    rows = {}
    for r in document["rows"]:
        if "failed" in r:
            continue
        rows[f"{r['length']} | {r['route']} | seconds"] = r["seconds"]
        rows[f"{r['length']} | {r['route']} | peak GiB"] = r["peak"] / 2**30
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=11, help="bench_attention's --repeats")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--only", help="bench_attention's --only: one size")
    parser.add_argument(
        "--skip", choices=("attention", "long-context"), action="append", default=[]
    )
    add_load_argument(parser)  # passed on to both benchmarks
    allocator.add_argument(parser)  # passed on to bench_attention
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="headlab-versus-") as tmp:
        old = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), args.rev],
            check=True,
        )
        try:
            sides = {args.rev: old, "this tree": ROOT}
            medians = _measure(sides, args, Path(tmp))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False
            )
    names = list(sides)
    print(f"\n| row | {names[0]} | {names[1]} | this tree / {names[0]} |")
    print("| --- | --- | --- | --- |")
    for key in medians[names[1]]:
        if key in medians[names[0]]:
            a, b = medians[names[0]][key], medians[names[1]][key]
            print(f"| {key} | {a:.4g} | {b:.4g} | {b / a:.3f} |")
    print(f"\nload average at the end: {os.getloadavg()}")
    return 0


def _measure(sides: dict[str, Path], args, tmp: Path) -> dict[str, dict[str, float]]:
    """Median over the rounds of every row, per side."""
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    order = list(sides)
    for round_ in range(args.rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:
            tree = sides[name]
            rows: dict[str, float] = {}
            if "attention" not in args.skip:
                command = [
                    sys.executable,
                    str(HERE / "bench_attention.py"),
                    "--repeats",
                    str(args.repeats),
                    "--threads",
                    str(args.threads),
                ]
                command += ["--only", args.only] if args.only else []
                command += ["--load", args.load, "--allocator", args.allocator]
                rows |= attention_rows(_run(command, tree / "src", tmp / "a.json"))
            if "long-context" not in args.skip:
                command = [
                    sys.executable,
                    str(tree / "benchmarks" / "bench_long_context.py"),
                    "--random-weights",
                    "--threads",
                    str(args.threads),
                    "--routes",
                    "forward",
                    "streaming",
                    "--lengths",
                    *map(str, args.lengths),
                    "--load",
                    args.load,
                ]
                rows |= long_context_rows(_run(command, tree / "src", tmp / "l.json"))
            for key, value in rows.items():
                samples[name].setdefault(key, []).append(value)
            print(f"round {round_ + 1}, {name}: {len(rows)} rows", flush=True)
    return {
        name: {key: statistics.median(values) for key, values in rows.items()}
        for name, rows in samples.items()
    }


if __name__ == "__main__":
    raise SystemExit(main())

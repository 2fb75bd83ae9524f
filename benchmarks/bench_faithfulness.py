"""SmolLM2's induction circuit over MIB's whole faithfulness curve: top-n and greedy circuits of
EAP's scores on every edge of the graph, against random circuits of the same sizes.

    flock /work/heavy.lock env PYTHONPATH=src HF_HUB_OFFLINE=1 \\
        python benchmarks/bench_faithfulness.py [--pairs 8] [--length 40] [--seeds 3] \\
        [--out faithfulness.json]

Task: issue 30's prototype (n sequences BOS + r + r, r ``length`` random tokens; corrupted
BOS + r' + r; the mean log-probability of the second half's next tokens). EAP scores every edge
of the model (70,651 on SmolLM2); ``faithfulness_curves`` measures the top-n and greedy circuits
at MIB's fractions (0.1% .. 100%) beside ``seeds`` random circuits of each size, in the same
runs, with MIB's CPR and CMD. Prints the table and the load average; ``--out`` writes both
curves (JSON: {"top": FaithfulnessCurve, "greedy": ...}, with the wall time of each
fraction), which ``report.circuit_figures.faithfulness_curves_figure`` draws.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--length", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.out is not None and args.out.exists():
        parser.error(f"--out {args.out} exists (write a new path)")

    import headlab
    from headlab.circuits.attribution import edge_attribution
    from headlab.circuits.circuit_patching import CircuitPatcher
    from headlab.circuits.faithfulness import faithfulness_curves
    from headlab.circuits.patching import Patcher
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs

    started = time.perf_counter()
    model = headlab.models.load("smollm2")
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)
    patcher = Patcher(model, pairs.clean, pairs.corrupted, metric)
    print(
        f"load average {os.getloadavg()[0]:.1f}; metric clean {patcher.clean_value:.3f}, "
        f"corrupted {patcher.corrupted_value:.3f}",
        flush=True,
    )
    start = time.perf_counter()
    scores = edge_attribution(model, pairs.clean, pairs.corrupted, metric, patcher=patcher)
    print(f"EAP: {len(scores.edges)} edges in {time.perf_counter() - start:.1f} s", flush=True)
    circuits = CircuitPatcher(patcher)
    times: list[float] = []
    last = [time.perf_counter()]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        print(
            f"  fraction {done}/{total}: {times[-1]:.0f} s, load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )

    top, greedy = faithfulness_curves(
        circuits, scores, ("top", "greedy"), seeds=args.seeds, progress=progress
    )
    print(f"{'edges':>7} {'n':>6} {'top':>7} {'greedy':>7}  random (seeds)")
    for i, f in enumerate(top.fractions):
        rand = " ".join(f"{r:+.3f}" for r in top.random[i])
        print(
            f"{100 * f:6.1f}% {top.sizes[i]:6d} {top.faithfulness[i]:+7.3f} "
            f"{greedy.faithfulness[i]:+7.3f}  {rand}"
        )
    for curve in (top, greedy):
        print(f"{curve.selection:>6}: CPR {curve.cpr:.4f}, CMD {curve.cmd:.4f}")
    print(
        "random: CPR "
        + ", ".join(f"{v:.4f}" for v in top.random_cpr)
        + "; CMD "
        + ", ".join(f"{v:.4f}" for v in top.random_cmd)
    )
    print(f"total {time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.1f}")
    if args.out is not None:
        data = {
            "top": top.to_dict(),
            "greedy": greedy.to_dict(),
            "seconds": times,
            "pairs": args.pairs,
            "length": args.length,
        }
        partial = args.out.with_name(args.out.name + ".partial")
        partial.write_text(json.dumps(data, indent=1))
        partial.rename(args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Circuit evaluation and MIB's faithfulness curve on SmolLM2: the shifts as one product per
receiver layer (this tree) beside the loop over senders they replaced (the tests' reference
``LoopPatcher``, that loop as it was, run on this tree's layer-by-layer run), at 1 and 2 torch
threads, quiet and with a CPU-bound competitor on each core, and against plain forwards.

    PYTHONPATH=src python benchmarks/bench_circuit_threads.py [--pairs 3]
        [--length 40] [--load both] [--rounds 1] [--curve quiet:1:product ...]

Task: the induction pairs of ``headlab circuits`` (n sequences BOS + r + r, r ``length`` random
tokens; corrupted BOS + r' + r). Measured per load (``--load``: quiet, busy = one competing
CPU-bound process per core, ``machine_load.competing``), per thread count (fixed with
``torch.set_num_threads``; the product's own policy, one thread while another process competes,
is switched off so that both counts are measured) and per implementation, in interleaved rounds:

- evaluation: ``metric`` of 3 random circuits of 20% of the edges (the other 80% patched), one
  call;
- curve: ``faithfulness_curve`` over MIB's 10 fractions with 3 random circuits per size (and the
  top-n circuit of random scores: 4 circuits per size; the size of every edge needs no run), and
  the same number of plain forwards of the clean batch (``Patcher.runner.forward`` from layer 0:
  the model's forward, no patching) for the ratio the curve is held to.

Prints one Markdown table (median wall and CPU seconds per load, threads, implementation; CPU
seconds of this process, every thread) and the load averages before and after each load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine_load import competing, load_average, loads  # noqa: E402

FRACTIONS_RUN = 9  # MIB's 10 fractions; the last (every edge kept) needs no run


def _loop_patcher():
    """The loop over senders, as the tests keep it for their float64 comparison."""
    for folder in ("circuits", "models"):  # the test module and the families it imports
        sys.path.insert(0, str(HERE.parent / "tests" / folder))
    from test_circuit_patching_product import LoopPatcher

    return LoopPatcher


@contextlib.contextmanager
def _threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _busy(load: str):
    """One competitor per core when busy."""
    with contextlib.ExitStack() as stack:
        for _ in range(os.cpu_count() if load == "busy" else 1):
            stack.enter_context(competing(load))
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--length", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--load", choices=("quiet", "busy", "both"), default="both")
    parser.add_argument(
        "--curve",
        nargs="*",
        default=None,
        help="LOAD:THREADS:IMPL (product or loop) of the curves to measure "
        "(default: every one; each takes minutes)",
    )
    args = parser.parse_args()

    import headlab
    import headlab.circuits.circuit_patching as new
    from headlab.circuits.faithfulness import faithfulness_curve
    from headlab.circuits.patching import Patcher
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs
    from headlab.results.circuit_edges import EdgeScores

    loop_patcher = _loop_patcher()
    new.one_torch_thread = lambda when_busy=False: contextlib.nullcontext()  # counts fixed here
    model = headlab.models.load("smollm2")
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    patcher = Patcher(model, pairs.clean, pairs.corrupted, task_metric(pairs))
    names = [e.name for e in patcher.graph.edges]
    generator = torch.Generator().manual_seed(0)
    sets = []
    for _ in range(3):
        keep = torch.randperm(len(names), generator=generator)[: len(names) // 5].tolist()
        kept = {names[i] for i in keep}
        sets.append({n for n in names if n not in kept})
    scores = EdgeScores(
        "random",
        "logprob",
        names,
        torch.rand(len(names), generator=generator).tolist(),
        patcher.clean_value,
        patcher.corrupted_value,
    )
    patchers = {"product": new.CircuitPatcher(patcher), "loop": loop_patcher(patcher)}
    circuits_per_size = 4
    forwards = FRACTIONS_RUN * circuits_per_size
    clean = patcher.clean.resid[0]

    def evaluation(impl):
        return lambda: patchers[impl].metric(sets)

    def curve(impl):
        return lambda: faithfulness_curve(patchers[impl], scores, seeds=3)

    def plain():
        with torch.no_grad():
            for _ in range(forwards):
                patcher.runner.forward(0, clean, 1)

    print(
        f"SmolLM2, {args.pairs} pairs of {clean.shape[1]} tokens, {len(names)} edges; "
        f"torch {torch.__version__}, {os.cpu_count()} cores",
        flush=True,
    )
    rows: dict[tuple, list[float]] = {}
    seen = []
    for load in loads(args.load):
        with _busy(load):
            before = load_average()
            for round_ in range(args.rounds):
                for threads in args.threads:
                    steps = {("evaluation", impl): evaluation(impl) for impl in patchers}
                    wanted = [
                        impl
                        for impl in patchers
                        if args.curve is None or f"{load}:{threads}:{impl}" in args.curve
                    ]
                    for impl in wanted:
                        steps[("curve", impl)] = curve(impl)
                    if wanted:
                        steps[(f"{forwards} plain forwards", "model")] = plain
                    order = list(steps.items())
                    for key, step in order if round_ % 2 == 0 else reversed(order):
                        with _threads(threads):
                            start, cpu = time.perf_counter(), time.process_time()
                            step()
                            seconds = time.perf_counter() - start
                            cpu = time.process_time() - cpu
                        rows.setdefault((load, threads, *key), []).append((seconds, cpu))
                        print(
                            f"  {load}, {threads} thread(s), {key[0]}, {key[1]}: "
                            f"{seconds:.1f} s, CPU {cpu:.1f} s (load average "
                            f"{load_average():.1f})",
                            flush=True,
                        )
            seen.append(f"{load}: load average {before:.1f} to {load_average():.1f}")
    print("\n| load | threads | measured | implementation | median s | CPU s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (load, threads, what, impl), times in rows.items():
        wall = statistics.median(t for t, _ in times)
        cpu = statistics.median(c for _, c in times)
        print(f"| {load} | {threads} | {what} | {impl} | {wall:.1f} | {cpu:.1f} |")
    print("\n" + "; ".join(seen))


if __name__ == "__main__":
    main()

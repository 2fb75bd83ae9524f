"""Where the CPU time of headlab's EAP goes, part by part: the process CPU time spent inside each
of the parts below, summed over ``--calls`` calls after one warm-up call, per call.

    PYTHONPATH=src python benchmarks/eap_cpu_parts.py [--pairs 6] [--length 32] [--calls 2]

Task as bench_eap_plain.py (SmolLM2, induction, 6 pairs of 65 tokens), one torch thread. The
parts nest: ``attribution_scores`` holds the receivers' gradients and the writes; the clean
run (``clean_gradient_run``) and the layer checks (``_plans``) are inside the patcher's set-up,
as is the corrupted run (``Runner.cache``).
"""

from __future__ import annotations

import argparse
import collections
import os
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--calls", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)

    import headlab
    import headlab.circuits.attribution as attribution
    import headlab.circuits.gradient_run as gradient_run
    from headlab.circuits.patching import Patcher
    from headlab.circuits.resume import Runner
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs

    spent: collections.Counter = collections.Counter()

    def timed(owner, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def call(*args, **kwargs):
            start = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - start

        setattr(owner, name, call)

    parts = [
        (attribution, "clean_gradient_run", "the clean forward and backward"),
        (Runner, "cache", "the corrupted forward (its cache)"),
        (attribution, "_plans", "the layer checks"),
        (attribution, "attribution_scores", "the scores (the rows below and the products)"),
        (gradient_run, "_mlp_input_grad", "  receivers' gradients: MLPs"),
        (gradient_run, "_attention_input_grads", "  receivers' gradients: attention"),
        (Patcher, "write_rows", "  the writes, with their check"),
    ]
    for owner, name, label in parts:
        timed(owner, name, label)
    model = headlab.models.load("smollm2")
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)

    def call():
        return attribution.edge_attribution(model, pairs.clean, pairs.corrupted, metric)

    call()
    spent.clear()
    start = time.process_time()
    for _ in range(args.calls):
        call()
    total = (time.process_time() - start) / args.calls
    print(f"load average {os.getloadavg()[0]:.1f}; CPU s per call {total:.2f}")
    for _, _, label in parts:
        print(f"{label:<48} {spent[label] / args.calls:.2f}")


if __name__ == "__main__":
    main()

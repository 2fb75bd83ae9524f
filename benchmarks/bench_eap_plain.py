"""headlab's EAP over every edge of SmolLM2 beside a plain EAP written with torch hooks
(``plain_eap.py``, on transformers' own model of the same GGUF, SDPA attention), in one process,
the two interleaved round by round: the process CPU time of each call, medians and their ratio.

    PYTHONPATH=src python benchmarks/bench_eap_plain.py [--pairs 6] [--length 32] [--rounds 5]
        [--threads 1] [--profile FILE]

Task: induction, BOS + r + r against BOS + r' + r (6 pairs of 65 tokens by default); metric:
the mean log-probability of the second half's next tokens. Each call goes from the token ids to
every edge's score (its own clean and corrupted runs included). The scores are checked equal
first (every edge of headlab's graph found in the plain version's, the largest difference
printed); the exit status is 1 above ``--tolerance`` times the largest score (float32 sums of
224,640 products per edge, in another order). ``--profile FILE``: headlab's call once
more under cProfile, its statistics written to FILE.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from long_context_routes import transformers_gguf
from plain_eap import plain_eap

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _cpu(call):
    start = time.process_time()
    result = call()
    return result, time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    import headlab
    from headlab.circuits.attribution import edge_attribution
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs
    from headlab.models.packaged import packaged_smollm2

    model = headlab.models.load("smollm2")
    hf, _ = transformers_gguf(packaged_smollm2(), "sdpa")
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)
    print(
        f"load average {os.getloadavg()[0]:.1f}, torch threads {torch.get_num_threads()}, "
        f"{args.pairs} pairs of {pairs.clean.shape[1]} tokens",
        flush=True,
    )
    calls = {
        "headlab": lambda: edge_attribution(model, pairs.clean, pairs.corrupted, metric),
        "plain": lambda: plain_eap(hf, pairs.clean, pairs.corrupted, metric),
    }
    ours, _ = _cpu(calls["headlab"])
    reference, _ = _cpu(calls["plain"])
    missing = [n for n in ours.edges if n not in reference]
    if missing or len(reference) != len(ours.edges):
        print(f"edges differ: {len(ours.edges)} in headlab, {len(reference)} in the plain one")
        return 1
    differences = [abs(s - reference[n]) for n, s in zip(ours.edges, ours.scores, strict=True)]
    worst = max(differences)
    largest = max(abs(s) for s in ours.scores)
    print(
        f"{len(ours.edges)} edges; largest difference {worst:.1e} ({worst / largest:.1e} of the "
        f"largest score, {largest:.2f}); "
        f"metric clean {ours.clean_metric:.4f}, corrupted {ours.corrupted_metric:.4f}",
        flush=True,
    )
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(args.rounds):
        order = list(calls.items())
        for name, call in order if round_ % 2 == 0 else reversed(order):
            cpu[name].append(_cpu(call)[1])
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {v[-1]:.2f} s" for n, v in cpu.items()))
    for name, values in cpu.items():
        print(f"{name}: median CPU {statistics.median(values):.2f} s")
    ratio = statistics.median(cpu["headlab"]) / statistics.median(cpu["plain"])
    print(f"headlab / plain: {ratio:.2f}x CPU; load average after {os.getloadavg()[0]:.1f}")
    if args.profile:
        import cProfile

        cProfile.runctx("calls['headlab']()", globals(), {"calls": calls}, args.profile)
    return 0 if worst <= args.tolerance * max(1.0, largest) else 1


if __name__ == "__main__":
    sys.exit(main())

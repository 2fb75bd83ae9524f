"""SmolLM2's induction circuit, the issue's "figures to beat" measured with headlab.

    PYTHONPATH=src python benchmarks/bench_circuits.py [--pairs 8] [--length 40] [--steps 5]
        [--chunk N] [--threads N] [--skip-ig]

Task (issue 30's prototype): n sequences BOS + r + r, r ``length`` random tokens; corrupted
BOS + r' + r; metric: mean log-probability of the second half's next tokens. Edges: every head
of the earlier layers into the K input of the K/V groups 17.g1 and 18.g2 (315 edges on
SmolLM2). Exact path patching of those edges (timed), EAP over every edge of the model (timed),
EAP-IG with ``steps`` steps; Spearman, Pearson and top-10 overlap of each attribution against
exact patching on the 315 edges; the top edges. The machine's load average is printed.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _progress(what: str):
    started = time.perf_counter()

    def show(done: int, total: int) -> None:
        print(f"  {what}: {done}/{total} edges, {time.perf_counter() - started:.0f} s", flush=True)

    return show


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--length", type=int, default=40)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip-ig", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import headlab
    from headlab.circuits.attribution import edge_attribution
    from headlab.circuits.patching import Patcher
    from headlab.circuits.score_agreement import agreement
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs
    from headlab.results.circuit_edges import EdgeScores

    model = headlab.models.load("smollm2")
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)
    start = time.perf_counter()
    patcher = Patcher(model, pairs.clean, pairs.corrupted, metric)
    cached = time.perf_counter() - start
    print(f"load average {os.getloadavg()[0]:.1f}, torch threads {torch.get_num_threads()}")
    print(
        f"metric clean {patcher.clean_value:.3f}, corrupted {patcher.corrupted_value:.3f} "
        f"(prototype: -2.45, -12.48); clean and corrupted runs {cached:.1f} s"
    )
    edges = [
        e.name
        for receiver in ("17.g1", "18.g2")
        for e in patcher.graph.edges_into(receiver, "k")
        if e.sender[0].isdigit()
    ]
    start, cpu = time.perf_counter(), time.process_time()
    effects = patcher.effects(edges, chunk=args.chunk, progress=_progress("path patching"))
    exact_time, exact_cpu = time.perf_counter() - start, time.process_time() - cpu
    exact = EdgeScores(
        "path-patching",
        metric.kind,
        edges,
        effects.tolist(),
        patcher.clean_value,
        patcher.corrupted_value,
    )
    print(
        f"exact path patching: {len(edges)} edges in {exact_time:.1f} s, CPU {exact_cpu:.1f} s, "
        f"{args.chunk or patcher.default_chunk()} edges a run, load average now "
        f"{os.getloadavg()[0]:.1f} (prototype 550-900 s; target 120 s)"
    )
    for name, value in exact.top(5):
        print(f"  {name:>18} {value:+.3f}")
    start = time.perf_counter()
    eap = edge_attribution(model, pairs.clean, pairs.corrupted, metric, patcher=patcher)
    eap_k = EdgeScores(
        "eap",
        eap.metric,
        edges,
        [eap.scores[eap.edges.index(e)] for e in edges],
        eap.clean_metric,
        eap.corrupted_metric,
    )
    eap_time = time.perf_counter() - start
    print(f"EAP: {len(eap.edges)} edges (all) in {eap_time:.1f} s (prototype: 5 s, K edges only)")
    methods = [("eap", eap_k)]
    if not args.skip_ig:
        start = time.perf_counter()
        ig = edge_attribution(
            model,
            pairs.clean,
            pairs.corrupted,
            metric,
            method="eap-ig",
            steps=args.steps,
            edges=edges,
            patcher=patcher,
        )
        print(f"EAP-IG ({args.steps} steps): {time.perf_counter() - start:.1f} s")
        methods.append(("eap-ig", ig))
    print("method   spearman  pearson  top-10 shared  (prototype EAP: 0.885, 0.989, 9)")
    for name, scores in methods:
        found = agreement(exact, scores, k=10)
        print(f"{name:<8} {found.spearman:8.3f} {found.pearson:8.3f} {found.top_k_shared:6d}")


if __name__ == "__main__":
    main()

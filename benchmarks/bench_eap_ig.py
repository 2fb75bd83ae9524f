"""EAP-IG's variants against exact path patching on SmolLM2's 315 induction K-edges.

    PYTHONPATH=src python benchmarks/bench_eap_ig.py --exact-cache FILE [--pairs 8]
        [--length 40] [--runs eap,clean-corrupted,eap-ig-senders:5,eap-ig-activations:2]

The task and edges of ``bench_circuits.py`` (issue 30's prototype). Exact path patching of the
315 edges is read from ``--exact-cache`` (a circuit-edges JSON this script wrote) or run and
written there (a new file, atomically). Then each of ``--runs`` (``method:m``; ``m`` the
steps): ``eap``, ``eap-ig`` (Hanna et al.'s EAP-IG-inputs), ``eap-ig-activations`` (their
get_scores_ig_activations), ``eap-ig-senders`` (each edge over the runs that move its own
sender's node), ``clean-corrupted`` (their get_scores_clean_corrupted: the mean of the gradients
at the clean and the corrupted input), each timed, with Spearman, Pearson, the top-10 overlap
against exact patching and the scores of the three largest exact edges. The load average is
printed before each.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _exact(patcher, edges, metric, cache: Path):
    from headlab.results.circuit_edges import EdgeScores

    if cache.exists():
        exact = EdgeScores.from_dict(json.loads(cache.read_text()))
        if exact.edges != edges:
            raise SystemExit(f"{cache} holds other edges than this task's {len(edges)}")
        print(f"exact path patching read from {cache}")
        return exact
    start = time.perf_counter()
    effects = patcher.effects(edges)
    exact = EdgeScores(
        "path-patching",
        metric.kind,
        edges,
        effects.tolist(),
        patcher.clean_value,
        patcher.corrupted_value,
    )
    print(f"exact path patching: {len(edges)} edges in {time.perf_counter() - start:.1f} s")
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial")
    partial.write_text(json.dumps(exact.to_dict()))
    partial.replace(cache)
    return exact


def _scores(model, pairs, metric, patcher, edges, method: str, steps: int):
    from headlab.circuits.attribution import attribution_scores, edge_attribution

    if method == "clean-corrupted":
        parsed = [patcher.graph.edge(e) for e in edges]
        return attribution_scores(patcher, parsed, [0.0, 1.0]).tolist()
    found = edge_attribution(
        model,
        pairs.clean,
        pairs.corrupted,
        metric,
        method=method,
        steps=steps,
        edges=edges,
        patcher=patcher,
    )
    return found.scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exact-cache", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--length", type=int, default=40)
    parser.add_argument("--runs", default="eap,clean-corrupted,eap-ig-senders:5")
    args = parser.parse_args()

    import headlab
    from headlab.circuits.patching import Patcher
    from headlab.circuits.score_agreement import agreement
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs
    from headlab.results.circuit_edges import EdgeScores

    model = headlab.models.load("smollm2")
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)
    patcher = Patcher(model, pairs.clean, pairs.corrupted, metric)
    print(f"metric clean {patcher.clean_value:.3f}, corrupted {patcher.corrupted_value:.3f}")
    edges = [
        e.name
        for receiver in ("17.g1", "18.g2")
        for e in patcher.graph.edges_into(receiver, "k")
        if e.sender[0].isdigit()
    ]
    exact = _exact(patcher, edges, metric, args.exact_cache)
    top = [name for name, _ in exact.top(3)]
    print("exact top 3: " + ", ".join(f"{n} {exact.scores[edges.index(n)]:+.2f}" for n in top))
    print(f"{'method':<22} {'spearman':>8} {'pearson':>8} {'top-10':>6} {'time':>7}  top-3 scores")
    for run in args.runs.split(","):
        method, _, steps = run.partition(":")
        load = os.getloadavg()[0]
        start = time.perf_counter()
        scores = _scores(model, pairs, metric, patcher, edges, method, int(steps or 1))
        took = time.perf_counter() - start
        found = agreement(exact, EdgeScores(method, metric.kind, edges, scores, 0.0, 0.0))
        tops = " ".join(f"{scores[edges.index(n)]:+.2f}" for n in top)
        print(
            f"{run:<22} {found.spearman:8.3f} {found.pearson:8.3f} {found.top_k_shared:6d} "
            f"{took:6.0f}s  {tops}  (load {load:.1f})",
            flush=True,
        )
    print(f"torch threads {torch.get_num_threads()}, load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

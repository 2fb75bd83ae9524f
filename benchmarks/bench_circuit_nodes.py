"""Head scores on SmolLM2's induction task, four ways in one run: EAP over every edge, node
attribution (``nodes``: one forward, one backward), its integrated-gradients variant and the exact
patching sweep (``head-patching``: one patched run per head, K/V group and MLP).

    PYTHONPATH=src python benchmarks/bench_circuit_nodes.py [--pairs 6] [--length 32]
        [--steps 5] [--by-position]

Task: n sequences BOS + r + r, r ``length`` random tokens; corrupted BOS + r' + r; metric: the
mean log-probability of the second half's next tokens (bench_circuits.py's). Each method is
timed from the token ids to its scores (its own clean and corrupted runs included), wall and
CPU; the attributions' agreement with the exact sweep (Spearman, Pearson, top-10 shared) on
the 270 heads and on every node. The machine's load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _timed(what: str, call):
    start, cpu = time.perf_counter(), time.process_time()
    result = call()
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    print(f"{what}: {wall:.1f} s wall, {used:.1f} s CPU", flush=True)
    return result, wall


def _as_edges(scores, names):
    from headlab.results.circuit_edges import EdgeScores

    values = [scores.score(n) for n in names]
    return EdgeScores(
        "eap", scores.metric, names, values, scores.clean_metric, scores.corrupted_metric
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--by-position", action="store_true")
    args = parser.parse_args()

    import headlab
    from headlab.circuits.attribution import edge_attribution
    from headlab.circuits.head_patching import head_patching
    from headlab.circuits.node_attribution import node_attribution
    from headlab.circuits.score_agreement import agreement
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs

    model = headlab.models.load("smollm2")
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)
    ids = (model, pairs.clean, pairs.corrupted, metric)
    print(
        f"load average {os.getloadavg()[0]:.1f}, torch threads {torch.get_num_threads()}, "
        f"{args.pairs} pairs of {pairs.clean.shape[1]} tokens"
    )
    eap, _ = _timed("EAP, every edge", lambda: edge_attribution(*ids))
    print(f"  {len(eap.edges)} edges")
    nodes, _ = _timed(
        "nodes (attribution)", lambda: node_attribution(*ids, by_position=args.by_position)
    )
    ig, _ = _timed(
        f"nodes-ig ({args.steps} steps)",
        lambda: node_attribution(*ids, method="nodes-ig", steps=args.steps),
    )
    sweep, _ = _timed(
        "head-patching (exact)", lambda: head_patching(*ids, by_position=args.by_position)
    )
    print(
        f"  {len(sweep.nodes)} nodes; metric clean {sweep.clean_metric:.3f}, corrupted "
        f"{sweep.corrupted_metric:.3f}"
    )
    heads = [n for n in sweep.nodes if "g" not in n and not n.startswith("mlp")]
    print("against the exact sweep   spearman  pearson  top-10 shared")
    exact_heads, exact_all = _as_edges(sweep, heads), _as_edges(sweep, sweep.nodes)
    for name, scores in (("nodes", nodes), ("nodes-ig", ig)):
        for where, exact, names in (
            ("heads", exact_heads, heads),
            ("all nodes", exact_all, sweep.nodes),
        ):
            found = agreement(exact, _as_edges(scores, names), k=10)
            print(
                f"{name:<8} {where:<10} {found.spearman:14.3f} {found.pearson:8.3f} "
                f"{found.top_k_shared:8d}"
            )
    print("strongest nodes (exact, nodes, nodes-ig):")
    for name, value in sweep.top(8):
        print(f"  {name:>7} {value:+.3f} {nodes.score(name):+.3f} {ig.score(name):+.3f}")
    print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

"""TransformerLens' attribution patching of every head beside headlab's node attribution, on the
same SmolLM2 weights, in one process, the two interleaved round by round: time, CPU time and
whether the head scores agree.

    PYTHONPATH=src python benchmarks/bench_tl_attribution.py [--pairs 6] [--length 32]
        [--rounds 5] [--threads 1]

TransformerLens 4.3.0 (``TransformerBridge`` over transformers' own model of the packaged GGUF,
eager attention, as bench_three_ways.py loads it) runs the standard recipe (Nanda's attribution
patching): the clean run with a forward hook keeping each head's output ``hook_z`` and a
backward hook keeping its gradient (``metric.backward()``), the corrupted run's
``run_with_cache`` of ``hook_z``, and per head sum over batch, pos, d_head of
(z_corrupted - z_clean) * dm/dz_clean. headlab: ``node_attribution`` (``circuits --method
nodes``): one clean forward and backward, one corrupted forward, every head's, K/V group's and
MLP's score. Same task as bench_eap_plain.py (induction, 6 pairs of 65 tokens, mean
log-probability of the second half). Exit status 1 when the 270 head scores differ by more
than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from bench_three_ways import _gguf, load_transformer_lens

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tl_head_attribution(bridge, clean, corrupted, metric, frozen: bool = False) -> torch.Tensor:
    """(layer, head): the standard recipe (module docstring) on a TransformerBridge. ``frozen``:
    the weights need no gradient for that call, the embeddings' output is made to need one
    instead (``hook_embed``), so that the backward fills no weight's gradient."""

    def is_z(name: str) -> bool:
        return name.endswith("attn.hook_z")

    clean_z, grad_z = {}, {}

    def layer(hook) -> int:  # the hook reports hook_z's own point, blocks.L.attn.o.hook_in
        return int(hook.name.split(".")[1])

    def keep(act, hook):
        clean_z[layer(hook)] = act.detach()

    def keep_grad(grad, hook):
        grad_z[layer(hook)] = grad.detach()

    bridge.reset_hooks()
    bridge.add_hook(is_z, keep, "fwd")
    bridge.add_hook(is_z, keep_grad, "bwd")
    if frozen:
        bridge.add_hook("hook_embed", lambda act, hook: act.detach().requires_grad_(True), "fwd")
    weights = [p for p in bridge.parameters() if p.requires_grad] if frozen else []
    try:
        for p in weights:
            p.requires_grad_(False)
        value = metric(bridge(clean)[:, metric.positions])
        value.backward()
    finally:
        bridge.reset_hooks()
        for p in weights:
            p.requires_grad_(True)
    bridge.zero_grad(set_to_none=True)  # the recipe's backward also fills the weights' grads
    with torch.no_grad():
        _, cache = bridge.run_with_cache(corrupted, names_filter=is_z)
    # hook_z: (batch, pos, head, d_head)
    return torch.stack(
        [
            ((cache[f"blocks.{i}.attn.hook_z"] - clean_z[i]) * grad_z[i]).sum((0, 1, 3))
            for i in range(bridge.cfg.n_layers)
        ]
    )  # (layer, head)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", default=None, help="SmolLM2's GGUF (default: the packaged one)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument(
        "--frozen-weights",
        action="store_true",
        help="also the recipe with the weights frozen (its backward fills no weight gradient)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    import headlab
    from headlab.circuits.node_attribution import node_attribution
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs

    model = headlab.models.load("smollm2")
    bridge = load_transformer_lens(Path(_gguf(args)))
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)
    print(
        f"load average {os.getloadavg()[0]:.1f}, torch threads {torch.get_num_threads()}, "
        f"{args.pairs} pairs of {pairs.clean.shape[1]} tokens",
        flush=True,
    )
    calls = {
        "headlab": lambda: node_attribution(model, pairs.clean, pairs.corrupted, metric),
        "transformer_lens": lambda: tl_head_attribution(
            bridge, pairs.clean, pairs.corrupted, metric
        ),
    }
    if args.frozen_weights:
        calls["tl_frozen_weights"] = lambda: tl_head_attribution(
            bridge, pairs.clean, pairs.corrupted, metric, frozen=True
        )
        same = float((calls["tl_frozen_weights"]() - calls["transformer_lens"]()).abs().max())
        print(f"frozen weights against the recipe: largest difference {same:.1e}")
    ours, theirs = calls["headlab"](), calls["transformer_lens"]()
    layers, heads = theirs.shape
    mine = torch.tensor([[ours.score(f"{i}.{h}") for h in range(heads)] for i in range(layers)])
    difference = (mine - theirs.double()).abs()
    worst, at = float(difference.max()), int(difference.argmax())
    print(
        f"{layers * heads} head scores; largest difference {worst:.1e} at head "
        f"{at // heads}.{at % heads} (largest score {float(mine.abs().max()):.3f}); "
        f"{len(ours.nodes)} headlab nodes",
        flush=True,
    )
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    wall: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(args.rounds):
        order = list(calls.items())
        for name, call in order if round_ % 2 == 0 else reversed(order):
            start, used = time.perf_counter(), time.process_time()
            call()
            cpu[name].append(time.process_time() - used)
            wall[name].append(time.perf_counter() - start)
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {v[-1]:.2f} s CPU" for n, v in cpu.items()))
    for name in calls:
        print(
            f"{name}: median {statistics.median(wall[name]):.2f} s wall, "
            f"{statistics.median(cpu[name]):.2f} s CPU"
        )
    ratio = statistics.median(cpu["headlab"]) / statistics.median(cpu["transformer_lens"])
    print(f"headlab / transformer_lens: {ratio:.2f}x CPU; load average {os.getloadavg()[0]:.1f}")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

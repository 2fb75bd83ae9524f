"""EAP and path patching at long context on SmolLM2, beside transformers' SDPA forward+backward.

    flock /work/heavy.lock env PYTHONPATH=src python benchmarks/bench_circuits_long.py \\
        --lengths 2048 8192

Task: induction at ``length`` tokens, one text BOS + r + r' ... (``TaskRequest("induction", 1,
(length - 1) // 2)``: r half the length, corrupted BOS + r' + r); metric: the mean
log-probability of the repeated half's next tokens (about length / 2 positions). Ways, each
in a fresh process (``fresh_process``: peak resident memory above the process's before the
call, the call's wall time; a warm-up call at 64 tokens first):

- ``sdpa``: SmolLM2 on transformers' own attention (``set_attn_implementation("sdpa")`` on the
  model headlab loads: the same weights, the same memory before the call), forward and
  backward of the same metric on the same positions (``logits_to_keep``), the weights frozen,
  the gradient taken at the input embeddings (the least a backward through every layer holds).
- ``eap``: headlab's ``edge_attribution`` of every edge of the graph, the ``Patcher`` (clean and
  corrupted runs) included.
- ``patch``: exact path patching (``Patcher.effects``) of ``--edges`` edges into the K input of
  18.g2 from the heads of layers 16 and 17, the ``Patcher`` included.
- ``sdpa-loss``: the same model on transformers' SDPA, forward and backward of its own
  next-token loss (``labels=``: every position's logits) on the first ``length`` tokens of
  headlab's long document, the gradient taken at the input embeddings.
- ``michel``: what Michel et al.'s importance (``heads.importance.head_importance``) does per
  batch, on that one text: the model's own objective (``TransformersModel.objective``: the
  block-wise next-token loss of ``block_logits``) and its gradient at the head mask xi.

The table gives each way's seconds and peak, and the ratios to its baseline at the same length
(eap and patch: sdpa; michel: sdpa-loss) against the issue's bounds (1.5x memory, 2x time); the
load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from fresh_process import run_child

os.environ.setdefault("HF_HUB_OFFLINE", "1")
WAYS = ("sdpa", "eap", "patch", "sdpa-loss", "michel")
BASELINE = {"eap": "sdpa", "patch": "sdpa", "michel": "sdpa-loss"}
BOUNDS = {"memory": 1.5, "time": 2.0}


def _task(model, length: int):
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs

    pairs = build_pairs(TaskRequest("induction", 1, (length - 1) // 2), model)
    return pairs.clean, pairs.corrupted, task_metric(pairs)


def child(way: str, length: int, edges: int) -> dict:
    import torch

    import headlab
    from fresh_process import measure
    from headlab.circuits.attribution import edge_attribution
    from headlab.circuits.patching import Patcher

    model = headlab.models.load("smollm2")
    hf = model.model
    hf.requires_grad_(False)
    tasks = {n: _task(model, n) for n in (64, length)}
    names = [f"{layer}.{h}->18.g2<k>" for layer in (16, 17) for h in range(9)][:edges]
    if way.startswith("sdpa"):  # the same weights on transformers' own attention
        hf.set_attn_implementation("sdpa")
    document = headlab.models.long_document()
    xi = [torch.ones(h, requires_grad=True) for h in model.heads_per_layer]

    def step(n: int):
        if way == "michel":
            loss = model.objective([document], xi, max_length=n)
            return torch.autograd.grad(loss, xi)
        if way == "sdpa-loss":
            ids = model.tokenize([document], n).input_ids
            embeds = hf.get_input_embeddings()(ids).detach().requires_grad_(True)
            loss = hf(inputs_embeds=embeds, labels=ids, use_cache=False).loss
            return torch.autograd.grad(loss, embeds)
        clean, corrupted, metric = tasks[n]
        if way == "eap":
            return edge_attribution(model, clean, corrupted, metric)
        if way == "patch":
            return Patcher(model, clean, corrupted, metric).effects(names)
        embeds = hf.get_input_embeddings()(clean).detach().requires_grad_(True)
        logits = hf(inputs_embeds=embeds, logits_to_keep=metric.positions, use_cache=False).logits
        (grad,) = torch.autograd.grad(metric(logits)[0], embeds)
        return grad

    step(64)
    return {"way": way, "length": length, **measure(step, length)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--edges", type=int, default=4, help="edges path patching measures")
    parser.add_argument("--child", nargs=2, metavar=("WAY", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.edges)))
        return 0
    if any(n < 65 for n in args.lengths):
        parser.error(f"--lengths must be >= 65, got {args.lengths}")
    if not 1 <= args.edges <= 18:
        parser.error(f"--edges must be between 1 and 18, got {args.edges}")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| tokens | way | seconds | / base | peak above start (MiB) | / base |")
    print("| --- | --- | --- | --- | --- | --- |")
    for length in args.lengths:
        base = {}
        for way in args.ways:
            command = [
                sys.executable,
                __file__,
                "--child",
                way,
                str(length),
                "--edges",
                str(args.edges),
            ]
            row, why = run_child(command)
            if row is None:
                print(f"| {length} | {way} | failed: {why} | | | |", flush=True)
                continue
            mib = (row["peak"] - row["before"]) / 2**20
            ratios = ["", ""]
            base[way] = (row["seconds"], mib)
            if BASELINE.get(way) in base:
                seconds, memory = base[BASELINE[way]]
                ratios = [f"{row['seconds'] / seconds:.2f}", f"{mib / memory:.2f}"]
            print(
                f"| {length} | {way} | {row['seconds']:.1f} | {ratios[0]} | {mib:.0f} | "
                f"{ratios[1]} |",
                flush=True,
            )
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"bounds (issue 30): memory {BOUNDS['memory']}x, time {BOUNDS['time']}x of sdpa")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

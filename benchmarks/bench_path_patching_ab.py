"""Exact path patching of SmolLM2's induction K-edges: headlab's ``Patcher`` beside an independent
reference written on transformers' own modules, interleaved in one process on one thread.

    PYTHONPATH=src python benchmarks/bench_path_patching_ab.py [--pairs 6] [--length 32]
        [--rounds 2] [--chunk N] [--receivers 17.g1 18.g2]

Task: bench_circuits.py's induction pairs (BOS + r + r, corrupted BOS + r' + r, the mean
log-probability of the repeated half's next tokens); edges: every head of the earlier layers into
the K input of the K/V groups 17.g1 and 18.g2 (315 edges on SmolLM2).

The reference (``reference_effects``) shares no code with headlab's circuits: SmolLM2 loaded by
``AutoModelForCausalLM.from_pretrained`` with SDPA from the same converted weights, torch hooks
on ``o_proj`` and ``k_proj``. For an edge u -> (L, g): u's write is its corrupted minus clean
output through its W_O columns; the patched K of group g is ``k_proj(input_layernorm(clean
stream at L + write))``; the patched runs of a chunk of edges are stacked on the batch axis and
start at layer L from the clean stream (nothing before L recomputed), group g's K columns taken
from the patched K and every other column clean; the metric reads the final norm and ``lm_head``
at the kept positions. Both sides are timed from the token ids to the effects (their own clean
and corrupted runs included), CPU time of the process, alternating which goes first each round;
the largest difference of the effects is printed first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

import torch
from torch import Tensor

from side_by_side import interleaved_cpu

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def load_reference():
    """SmolLM2 in transformers with SDPA, from the converted weights headlab reads."""
    from transformers import AutoModelForCausalLM

    from headlab.models.gguf_cache import converted
    from headlab.models.packaged import packaged_smollm2

    folder = converted(packaged_smollm2())
    return AutoModelForCausalLM.from_pretrained(
        str(folder), attn_implementation="sdpa", dtype=torch.float32
    ).eval()


def _full_run(hf, ids: Tensor):
    """(inputs of every layer (batch, pos, d_model), o_proj's input per layer (batch, pos,
    head * d_head)) of one run of ``ids``."""
    seen: list[Tensor] = []
    handles = [
        layer.self_attn.o_proj.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
        for layer in hf.model.layers
    ]
    try:
        out = hf.model(input_ids=ids, output_hidden_states=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return out.hidden_states[:-1], seen


def _metric(logits: Tensor, copies: int, answers, weight) -> Tensor:
    """The weighted mean log-probability of ``answers`` (batch, n_kept) per copy, (copies,),
    from the logits at the kept positions (copies * batch, n_kept, vocab)."""
    logp = logits.log_softmax(-1).view(copies, *answers.shape, -1)
    index = answers[None, :, :, None].expand(copies, -1, -1, 1)
    per = logp.gather(-1, index).squeeze(-1)  # (copies, batch, n_kept)
    return (per * weight).sum((1, 2)) / weight.sum()


def reference_effects(hf, clean, corrupted, positions, answers, weight, edges, chunk):
    """metric(edge patched) - metric(clean) for each edge (sender layer, sender head, receiver
    layer, receiver K/V group), (len(edges),) float64 (the module docstring)."""
    attn = hf.model.layers[0].self_attn
    d = attn.head_dim
    b = clean.shape[0]
    clean_in, clean_heads = _full_run(hf, clean)
    _, corrupted_heads = _full_run(hf, corrupted)
    logits = hf(input_ids=clean, use_cache=False).logits[:, positions]
    clean_value = float(_metric(logits, 1, answers, weight)[0])
    position_ids = torch.arange(clean.shape[1])[None]
    out = torch.zeros(len(edges), dtype=torch.float64)
    for receiver in sorted({e[2] for e in edges}):
        indices = [i for i, e in enumerate(edges) if e[2] == receiver]
        layer = hf.model.layers[receiver]
        for start in range(0, len(indices), chunk):
            part = [edges[i] for i in indices[start : start + chunk]]
            copies = len(part)
            writes = []
            for s_layer, s_head, _, _ in part:
                cols = slice(s_head * d, (s_head + 1) * d)
                change = corrupted_heads[s_layer][..., cols] - clean_heads[s_layer][..., cols]
                w_o = hf.model.layers[s_layer].self_attn.o_proj.weight[:, cols]
                writes.append(change @ w_o.t())  # (batch, pos, d_model)
            base = clean_in[receiver].repeat(copies, 1, 1)  # (copies * batch, pos, d_model)
            patched_k = layer.self_attn.k_proj(layer.input_layernorm(base + torch.cat(writes)))
            take = torch.zeros(copies * b, 1, patched_k.shape[-1], dtype=torch.bool)
            for c, (_, _, _, group) in enumerate(part):
                take[c * b : (c + 1) * b, :, group * d : (group + 1) * d] = True

            def splice(_module, _args, k, take=take, patched_k=patched_k):
                return torch.where(take, patched_k, k)

            handle = layer.self_attn.k_proj.register_forward_hook(splice)
            try:
                hidden = base
                rotary = hf.model.rotary_emb(hidden, position_ids)
                for block in hf.model.layers[receiver:]:
                    hidden = block(hidden, position_embeddings=rotary, position_ids=position_ids)
                    hidden = hidden[0] if isinstance(hidden, tuple) else hidden
            finally:
                handle.remove()
            logits = hf.lm_head(hf.model.norm(hidden[:, positions]))
            values = _metric(logits, copies, answers, weight)
            out[indices[start : start + copies]] = values.double() - clean_value
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=None)
    parser.add_argument("--receivers", nargs="+", default=["17.g1", "18.g2"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")

    import headlab
    from headlab.circuits.patching import Patcher
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs

    model = headlab.models.load("smollm2")
    hf = load_reference()
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)
    probe = Patcher(model, pairs.clean, pairs.corrupted, metric)
    graph = probe.graph
    edges = [
        e
        for receiver in args.receivers
        for e in graph.edges_into(receiver, "k")
        if graph.node(e.sender).kind == "head"
    ]
    names = [e.name for e in edges]
    tuples = [
        (
            graph.node(e.sender).layer,
            graph.node(e.sender).index,
            graph.node(e.receiver).layer,
            graph.node(e.receiver).index,
        )
        for e in edges
    ]
    chunk = args.chunk or probe.default_chunk()
    del probe
    answers = pairs.answers[:, metric.positions]
    task = (pairs.clean, pairs.corrupted, metric.positions, answers, metric.weight)
    sides = {
        "headlab": lambda: Patcher(model, pairs.clean, pairs.corrupted, metric).effects(
            names, chunk=chunk
        ),
        "reference": lambda: reference_effects(hf, *task, tuples, chunk),
    }
    print(
        f"SmolLM2, {args.pairs} pairs of {pairs.clean.shape[1]} tokens, {len(names)} edges, "
        f"{chunk} edges a run, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    found: dict[str, Tensor] = {}

    def compare() -> None:
        gap = (found["headlab"] - found["reference"]).abs().max().item()
        print(f"largest difference of the effects: {gap:.1e}", flush=True)

    with torch.inference_mode():
        cpu, wall = interleaved_cpu(sides, args.rounds, found, compare)
    ratio = statistics.median(cpu["headlab"]) / statistics.median(cpu["reference"])
    for side in sides:
        print(
            f"{side}: median CPU {statistics.median(cpu[side]):.1f} s, wall "
            f"{statistics.median(wall[side]):.1f} s"
        )
    print(f"headlab / reference, CPU: {ratio:.2f}x")
    top = found["headlab"].abs().argsort(descending=True)[:3].tolist()
    print("top edges: " + ", ".join(f"{names[i]} {found['headlab'][i]:+.2f}" for i in top))
    print(f"load average after {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

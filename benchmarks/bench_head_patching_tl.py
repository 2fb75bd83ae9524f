"""headlab's patching sweep beside TransformerLens' ``get_act_patch_attn_head_out_all_pos`` on the
same SmolLM2 weights, in one process on one thread, interleaved: time and equality.

    PYTHONPATH=src python benchmarks/bench_head_patching_tl.py [--pairs 4] [--length 16]
        [--rounds 2] [--by-position]

Run it with a Python that has TransformerLens installed beside headlab's requirements (it is not
a dependency of headlab). Task: bench_circuits.py's induction pairs (BOS + r + r, corrupted
BOS + r' + r, the mean log-probability of the repeated half's next tokens). Both sweeps patch in
the noising direction: the clean run with one head's output (before W_O, TransformerLens' ``z``)
taken from the corrupted run. TransformerLens runs ``get_act_patch_attn_head_out_all_pos`` on
the clean tokens with the corrupted run's cache (its ``run_with_cache`` of every ``hook_z``,
included in its time), one whole forward per head, on ``TransformerBridge`` over transformers'
eager attention; headlab runs ``head_patching`` (every head, K/V group and MLP: 390 nodes of
which 270 heads, each run from its layer, the runs stacked). The SmolLM2 weights are the
converted ones headlab reads, loaded by ``from_pretrained``. The heads' scores are compared
(largest difference), then each side is timed (process CPU time) ``--rounds`` times, alternating
which goes first. ``--by-position`` does the same with ``get_act_patch_attn_head_out_by_pos``
(one forward per head and position) beside ``head_patching(by_position=True)``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

import torch

from side_by_side import interleaved_cpu

os.environ.setdefault("HF_HUB_OFFLINE", "1")
MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the checkpoint the GGUF was converted from


def load_transformer_lens():
    """TransformerBridge over SmolLM2 in transformers (eager attention), converted weights."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from headlab.models.gguf_cache import converted
    from headlab.models.packaged import packaged_smollm2

    folder = str(converted(packaged_smollm2()))
    hf = AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager", dtype=torch.float32
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return TransformerBridge.boot_transformers(
        MODEL_NAME, hf_model=hf, tokenizer=tokenizer, device="cpu"
    )


def transformer_lens_heads(bridge, clean, corrupted, metric, clean_value, by_position):
    """(layer, head) changes of the metric, or (layer, pos, head) with ``by_position``."""
    from transformer_lens import patching

    _, cache = bridge.run_with_cache(corrupted, names_filter=lambda name: name.endswith("hook_z"))

    def change(logits):  # (batch, pos, vocab) -> the metric's change from the clean run
        return metric(logits[:, metric.positions])[0] - clean_value

    sweep = (
        patching.get_act_patch_attn_head_out_by_pos
        if by_position
        else patching.get_act_patch_attn_head_out_all_pos
    )
    return sweep(bridge, clean, cache, change)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--by-position", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    os.environ.setdefault("TQDM_DISABLE", "1")

    import headlab
    from headlab.circuits.head_patching import head_patching
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest, build_pairs

    model = headlab.models.load("smollm2")
    bridge = load_transformer_lens()
    pairs = build_pairs(TaskRequest("induction", args.pairs, args.length), model)
    metric = task_metric(pairs)
    clean, corrupted = pairs.clean, pairs.corrupted
    by = args.by_position
    found: dict = {}

    def run_headlab():
        return head_patching(model, clean, corrupted, metric, by_position=by)

    def run_transformer_lens():
        clean_value = float(metric(bridge(clean)[:, metric.positions])[0])
        return transformer_lens_heads(bridge, clean, corrupted, metric, clean_value, by)

    sides = {"headlab": run_headlab, "transformer_lens": run_transformer_lens}
    print(
        f"SmolLM2, {args.pairs} pairs of {clean.shape[1]} tokens, by position: {by}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} thread(s), load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )

    def compare() -> None:
        print(f"largest difference of the heads' scores: {_gap(found, by):.1e}")

    with torch.inference_mode():
        cpu, wall = interleaved_cpu(sides, args.rounds, found, compare)
    ratio = statistics.median(cpu["headlab"]) / statistics.median(cpu["transformer_lens"])
    for side in sides:
        print(
            f"{side}: median CPU {statistics.median(cpu[side]):.1f} s, wall "
            f"{statistics.median(wall[side]):.1f} s"
        )
    print(f"headlab / TransformerLens, CPU: {ratio:.2f}x")
    print(f"strongest heads (headlab): {_strongest(found['headlab'])}")
    print(f"load average after {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def _heads(scores, by_position: bool) -> torch.Tensor:
    """headlab's heads as TransformerLens lays them out: (layer, head), or (layer, pos, head)."""
    layers, heads = len(scores.heads_per_layer), scores.heads_per_layer[0]
    index = {name: i for i, name in enumerate(scores.nodes)}
    rows = [index[f"{layer}.{head}"] for layer in range(layers) for head in range(heads)]
    if not by_position:
        return torch.tensor([scores.scores[i] for i in rows]).view(layers, heads)
    table = torch.tensor([scores.by_position[i] for i in rows])  # (layer * head, pos)
    return table.view(layers, heads, -1).transpose(1, 2)


def _gap(found: dict, by_position: bool) -> float:
    ours = _heads(found["headlab"], by_position)
    return (ours - found["transformer_lens"].double()).abs().max().item()


def _strongest(scores) -> str:
    heads = [(n, s) for n, s in scores.top(len(scores.nodes)) if "g" not in n and "mlp" not in n]
    return ", ".join(f"{n} {s:+.2f}" for n, s in heads[:3])


if __name__ == "__main__":
    main()

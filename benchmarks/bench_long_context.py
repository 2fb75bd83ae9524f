"""Every head's statistics at long context: streaming against a plain forward and the weights.

    PYTHONPATH=src python benchmarks/bench_long_context.py                 # SmolLM2, CPU
    PYTHONPATH=src python benchmarks/bench_long_context.py --bare          # one module, 32k
    PYTHONPATH=src python benchmarks/bench_long_context.py --device cuda   # on a GPU

Each (route, length) runs in a fresh Python process, one after the other, so that its peak
memory is its own: on the CPU the process's peak resident set during the run (VmHWM, reset just
before it) and its resident set just before the run (the weights and the interpreter); on a GPU
torch's peak allocated memory. Routes:

  forward       the model's own forward (fused SDPA, causal), logits included: what a user runs
  streaming     ``headlab.heads.streaming.model_head_sums`` (what ``long_text_statistics``
                runs): every head's statistics and heavy-hitter profile, weights reduced
                chunk by chunk
  roles         the same pass with every role score of ``long_text_statistics`` on top: window
                errors (4 sinks + 256), copy positions, blocked maps (what ``model heads
                --max-tokens`` runs since head roles exist)
  plan          the model's forward under a KV plan that windows half of its K/V groups
                (4 sinks + 256): one verification run of ``model kv-budget``
  materialised  the model's ``trace_batch``: every layer's full weights kept, as tools that
                read attention weights do (TransformerLens, nnsight, output_attentions); run
                only where its estimate fits in half the machine's memory

With ``--bare``: one ``MultiHeadAttention`` (12 heads, embed 768, no mask), its fused forward
against ``attention_statistics`` on random input. ``--random-weights``: SmolLM2's shapes with
random weights and random token ids (same work; the device machine cannot take the 98 MB GGUF).
``--threads N`` pins torch's threads. Times are one run each after a warm-up call at a short
length; the machine's load average is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

ROUTES = ("forward", "streaming", "roles", "plan", "materialised")


def _status(field: str) -> int:
    """A memory field of /proc/self/status in bytes (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


# SmolLM2-135M's sizes, for --random-weights (the device machine has no room for the GGUF).
SMOLLM2 = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}


def _model_runs(length: int, device: str, random_weights: bool, chunk_elements: int):
    """(runs, batch, warm batch) for SmolLM2 (packaged, or its shape with random weights)."""
    import torch

    from headlab.heads.streaming import model_head_sums
    from headlab.models import Decoder, TokenBatch, long_document

    if random_weights:
        from headlab.models.llama import LlamaDecoder
        from headlab.models.llama_config import LlamaConfig

        decoder = LlamaDecoder(LlamaConfig(**SMOLLM2))
        with torch.no_grad():  # transformers' initialisation: N(0, 0.02) matrices
            for p in decoder.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.02)
        model = Decoder("SmolLM2-135M shape, random", decoder, None)

        def tokens(n: int) -> TokenBatch:
            ids = torch.randint(0, SMOLLM2["vocab_size"], (1, n))
            return TokenBatch(ids.to(device), torch.ones_like(ids, dtype=torch.bool).to(device), [])
    else:
        from headlab.models import load

        model = load("smollm2")

        def tokens(n: int) -> TokenBatch:
            b = model.tokenize([long_document()], n)
            return TokenBatch(b.input_ids.to(device), b.attention_mask.to(device), b.tokens)

    model.model.to(device)

    def roles(b):
        from headlab.heads.attention_maps import block_size
        from headlab.heads.repeats import copy_sources

        n = b.input_ids.shape[1]
        sources = copy_sources(b.input_ids[0].cpu())[None].to(device)
        return model_head_sums(model, b, chunk_elements=chunk_elements, window=(4, 256),
                               copy_sources=sources, block=block_size(n))  # fmt: skip

    def plan(b):
        from headlab.heads.kv_budget import KVPlan, planned

        groups = [(layer, g) for layer, kv in enumerate(model.kv_heads_per_layer)
                  for g in range(kv)][::2]  # fmt: skip
        with planned(model, KVPlan(tuple(groups), 4, 256)):
            return model.run(b)

    runs = {
        "forward": lambda b: model.run(b),
        "streaming": lambda b: model_head_sums(model, b, chunk_elements=chunk_elements),
        "roles": roles,
        "plan": plan,
        "materialised": lambda b: model.trace_batch(b),
    }
    return runs, tokens(length), tokens(64)


def _bare_runs(length: int, device: str, chunk_elements: int):
    import torch

    from headlab import MultiHeadAttention
    from headlab.attention.streaming import attention_statistics

    mha = MultiHeadAttention(768, 12, batch_first=True, device=device).eval()
    x = torch.randn(1, length, 768, device=device)
    runs = {
        "forward": lambda x: mha(x, x, x, need_weights=False),
        "streaming": lambda x: attention_statistics(mha, x, chunk_elements=chunk_elements),
        "materialised": lambda x: mha.trace(x),
    }
    return runs, x, x[:, :64]


def _runs_for(route: str, bare: bool) -> bool:
    """The bare module has no model: no roles, no plan."""
    return not (bare and route in ("roles", "plan"))


def _child(route: str, length: int, args) -> dict:
    import torch

    torch.manual_seed(0)
    cuda = args.device == "cuda"
    if args.bare:
        runs, x, warm = _bare_runs(length, args.device, args.chunk_elements)
    else:
        runs, x, warm = _model_runs(length, args.device, args.random_weights, args.chunk_elements)
    fn = runs[route]
    with torch.inference_mode():
        fn(warm)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM: the peak of loading the model does not count
            before = _status("VmRSS")
        start = time.perf_counter()
        result = fn(x)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        del result
    peak = torch.cuda.max_memory_allocated() if cuda else _status("VmHWM")
    return {"route": route, "length": length, "seconds": seconds, "before": before, "peak": peak}


def _fits(route: str, length: int, bare: bool) -> bool:
    """The materialised route only where its weights take at most half of this machine."""
    if route != "materialised":
        return True
    from headlab.limits import machine_memory

    layers, heads = (1, 12) if bare else (30, 9)
    return 2 * layers * heads * length**2 * 4 <= machine_memory() / 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES))
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument("--chunk-elements", type=int, default=2**22)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--child", nargs=2, metavar=("ROUTE", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        result = _child(args.child[0], int(args.child[1]), args)
        print(json.dumps(result))
        return
    lengths = args.lengths or ([2048, 8192, 32768] if args.bare else [1024, 2048, 4096, 8192])
    rows = []
    load = os.getloadavg()[0]
    for length in lengths:
        for route in args.routes:
            if not _runs_for(route, args.bare):
                continue
            if not _fits(route, length, args.bare):
                print(f"{route:12s} {length:6d}  skipped: weights over half the memory", flush=True)
                continue
            command = [sys.executable, __file__, "--child", route, str(length)]
            command += ["--device", args.device, "--chunk-elements", str(args.chunk_elements)]
            command += ["--bare"] if args.bare else []
            command += ["--random-weights"] if args.random_weights else []
            command += ["--threads", str(args.threads)] if args.threads else []
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode:
                print(f"{route:12s} {length:6d}  failed: {done.stderr.strip()[-300:]}", flush=True)
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"{route:12s} {length:6d}  {row['seconds']:8.3g} s  peak "
                f"{row['peak'] / 2**30:6.2f} GiB  (before the run {row['before'] / 2**30:.2f})",
                flush=True,
            )
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, device {args.device}, "
        f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    print("| length | route | seconds | peak GiB | peak / forward | time / forward |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        base = next(
            (r for r in rows if r["route"] == "forward" and r["length"] == row["length"]), None
        )
        ratio_mem = f"{row['peak'] / base['peak']:.2f}" if base else "-"
        ratio_time = f"{row['seconds'] / base['seconds']:.2f}" if base else "-"
        print(
            f"| {row['length']} | {row['route']} | {row['seconds']:.3g} | "
            f"{row['peak'] / 2**30:.2f} | {ratio_mem} | {ratio_time} |"
        )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"device": args.device, "bare": args.bare, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

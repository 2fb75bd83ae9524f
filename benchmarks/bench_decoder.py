"""SmolLM2-135M on headlab's attention against transformers' LlamaForCausalLM (SDPA), same weights.

    PYTHONPATH=src python benchmarks/bench_decoder.py [--batch 4] [--seq 512] [--repeats 5]

Both models come from the packaged GGUF (float32, dequantised). Forward throughput: inference
mode, a batch of random token ids, timed round-robin (headlab, transformers, headlab, ...) so that
machine load hits both alike; tokens/s from the median. Also: the time to load the GGUF into
headlab's model, and one importance pass (``headlab model importance --model smollm2`` defaults:
300 corpus texts, 128 tokens). The machine's load average is printed with the results.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-importance", action="store_true")
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    from headlab.models import default_corpus, load
    from headlab.models.gguf import packaged_smollm2

    start = time.perf_counter()
    ours = load("smollm2")
    load_s = time.perf_counter() - start
    path = packaged_smollm2()
    start = time.perf_counter()
    theirs = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, attn_implementation="sdpa", dtype=torch.float32
    ).eval()
    theirs_load_s = time.perf_counter() - start

    ids = torch.randint(
        0,
        ours.config.vocab_size,
        (args.batch, args.seq),
        generator=torch.Generator().manual_seed(0),
    )
    runs = {"headlab": lambda: ours.model(ids), "transformers (sdpa)": lambda: theirs(ids).logits}
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        for fn in runs.values():
            fn()  # warm-up
        for _ in range(args.repeats):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    tokens = args.batch * args.seq
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"forward, batch {args.batch} x {args.seq} tokens, median of {args.repeats}:")
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, m in medians.items():
        print(f"  {name:22s} {m * 1000:8.0f} ms   {tokens / m:8.0f} tokens/s")
    ratio = medians["transformers (sdpa)"] / medians["headlab"]
    print(f"  headlab / transformers throughput: {ratio:.2f}x")
    print(f"load GGUF: headlab {load_s:.1f} s, transformers {theirs_load_s:.1f} s")
    if not args.skip_importance:
        from headlab.heads import head_importance

        texts = default_corpus(300)
        t0 = time.perf_counter()
        head_importance(ours, texts, max_length=128)
        print(f"importance pass, 300 texts x 128 tokens: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

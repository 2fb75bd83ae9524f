"""SmolLM2-135M on headlab's attention against transformers' LlamaForCausalLM (SDPA), same weights.

    PYTHONPATH=src python benchmarks/bench_decoder.py [--batch 4] [--seq 512] [--repeats 5]
        [--load quiet|busy|both] [--threads N] [--skip-importance]

Both models come from the packaged GGUF (float32, dequantised). Forward throughput: inference
mode, a batch of random token ids, timed round-robin (``side_by_side.interleaved``: headlab,
transformers, then the other way round, ...) so that machine load hits both alike; tokens/s from
the median, ratio = transformers' median / headlab's under the same load. ``--load busy`` times
them while one other CPU-bound process runs, ``--load both`` quiet and then busy
(``machine_load``). Also: the time to load the GGUF into each, and one importance pass
(``headlab model importance --model smollm2`` defaults: 300 corpus texts, 128 tokens), as the
machine is. The machine's load average is printed with the results.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from machine_load import add_load_argument
from side_by_side import load_table, medians_per_load

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASELINE = "transformers (sdpa)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--skip-importance", action="store_true")
    add_load_argument(parser)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM

    from headlab.models import default_corpus, load
    from headlab.models.packaged import packaged_smollm2

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
    runs = {"headlab": lambda: ours.model(ids), BASELINE: lambda: theirs(ids).logits}
    with torch.inference_mode():
        medians, seen = medians_per_load(runs, args.load, args.repeats)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"load average {', '.join(seen)}"
    )
    print(f"forward, batch {args.batch} x {args.seq} tokens, median of {args.repeats}:\n")
    print("\n".join(load_table(medians, BASELINE, args.batch * args.seq, "tokens")))
    print(f"\nload GGUF: headlab {load_s:.1f} s, transformers {theirs_load_s:.1f} s")
    if not args.skip_importance:
        from headlab.heads import head_importance

        texts = default_corpus(300)
        t0 = time.perf_counter()
        head_importance(ours, texts, max_length=128)
        print(f"importance pass, 300 texts x 128 tokens: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

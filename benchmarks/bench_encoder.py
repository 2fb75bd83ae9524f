"""Encoder throughput: headlab's MiniLM against sentence-transformers, and the importance pass.

    PYTHONPATH=src python benchmarks/bench_encoder.py [--n-texts 256] [--batch-size 32]
        [--repeats 5] [--load quiet|busy|both] [--threads N] [--skip-importance]

Both encoders embed the same texts with the same batch size and max_seq_length (256), in one
process, alternating repeat by repeat (``side_by_side.interleaved``) so that machine load hits
both alike; we report the median of the repeats, and ratio = sentence-transformers' median /
headlab's under the same load. ``--load busy`` times them while one other CPU-bound process
runs, ``--load both`` quiet and then busy (``machine_load``). headlab runs MiniLM on its
production route (transformers' BertModel on headlab's attention, fused path). Then one timed
run of the importance pass (forward + backward to the head mask) over the default corpus, as the
machine is. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from headlab.heads import head_importance
from headlab.models import default_corpus, default_model_dir, load
from machine_load import add_load_argument
from side_by_side import load_table, medians_per_load

BASELINE = "sentence-transformers"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--importance-texts", type=int, default=300)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--skip-importance", action="store_true")
    add_load_argument(parser)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from sentence_transformers import SentenceTransformer

    texts = default_corpus(args.n_texts)
    ours = load("minilm")
    theirs = SentenceTransformer(str(default_model_dir()), device="cpu")
    assert ours.pooling.max_seq_length == theirs.max_seq_length
    runs = {
        BASELINE: lambda: theirs.encode(texts, batch_size=args.batch_size, convert_to_tensor=True),
        "headlab": lambda: ours.embed(texts, args.batch_size),
    }
    medians, seen = medians_per_load(runs, args.load, args.repeats)

    print(
        f"machine: {platform.processor() or platform.machine()}, torch threads "
        f"{torch.get_num_threads()}, torch {torch.__version__}, "
        f"load average {', '.join(seen)}"
    )
    print(
        f"{args.n_texts} texts from the default corpus, batch {args.batch_size}, "
        f"max_seq_length {ours.pooling.max_seq_length}, median of {args.repeats}\n"
    )
    print("\n".join(load_table(medians, BASELINE, args.n_texts, "texts")))
    if not args.skip_importance:
        corpus = default_corpus(args.importance_texts)
        start = time.perf_counter()
        head_importance(ours, corpus)
        seconds = time.perf_counter() - start
        n = args.importance_texts
        print(f"\nimportance pass over {n} default-corpus texts: {seconds:.1f} s")


if __name__ == "__main__":
    main()

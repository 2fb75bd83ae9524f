"""Encoder throughput: headlab's MiniLM against sentence-transformers, and the importance pass.

    PYTHONPATH=src python benchmarks/bench_encoder.py [--n-texts 256] [--batch-size 32]
        [--repeats 5] [--skip-importance]

Both encoders embed the same texts with the same batch size and max_seq_length (256), in one
process, alternating repeat by repeat so that machine load hits both alike; we report the median
of the repeats. headlab runs the fused attention path (need_weights=False), as transformers' SDPA
path does. Then one timed run of the importance pass (forward + backward to the head mask) over
the default corpus. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from headlab.heads import head_importance
from headlab.models import default_corpus, default_model_dir, load_encoder


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--importance-texts", type=int, default=300)
    parser.add_argument("--skip-importance", action="store_true")
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    texts = default_corpus(args.n_texts)
    ours = load_encoder()
    theirs = SentenceTransformer(str(default_model_dir()), device="cpu")
    assert ours.pooling.max_seq_length == theirs.max_seq_length

    def run_ours():
        ours.embed(texts, args.batch_size)

    def run_theirs():
        theirs.encode(texts, batch_size=args.batch_size, convert_to_tensor=True)

    run_ours(), run_theirs()  # warm-up
    t_ours, t_theirs = [], []
    for _ in range(args.repeats):
        t_ours.append(_timed(run_ours))
        t_theirs.append(_timed(run_theirs))
    m_ours, m_theirs = statistics.median(t_ours), statistics.median(t_theirs)

    print(f"machine: {platform.processor() or platform.machine()}, torch threads "
          f"{torch.get_num_threads()}, torch {torch.__version__}")  # fmt: skip
    print(f"{args.n_texts} texts from the default corpus, batch {args.batch_size}, "
          f"max_seq_length {ours.pooling.max_seq_length}, median of {args.repeats}\n")  # fmt: skip
    print("| encoder | median s | texts/s | ratio |")
    print("| --- | --- | --- | --- |")
    print(f"| sentence-transformers | {m_theirs:.3f} | {args.n_texts / m_theirs:.1f} | 1.00x |")
    print(f"| headlab | {m_ours:.3f} | {args.n_texts / m_ours:.1f} | {m_theirs / m_ours:.2f}x |")
    if not args.skip_importance:
        corpus = default_corpus(args.importance_texts)
        seconds = _timed(lambda: head_importance(ours, corpus))
        n = args.importance_texts
        print(f"\nimportance pass over {n} default-corpus texts: {seconds:.1f} s")


if __name__ == "__main__":
    main()

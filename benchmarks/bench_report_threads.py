"""The report's small-matrix work on torch's threads against one thread, quiet and busy.

    PYTHONPATH=src python benchmarks/bench_report_threads.py [--repeats 5] [--load both]
        [--models minilm smollm2]

What `headlab report` measures besides reading results: the seed scenarios (33 compares of
8 x 16 set-ups with their gradients) and a model's attention on one text (MiniLM at 256 tokens,
the report's cut; SmolLM2 at 1024, the most ``model_text_attention`` takes). Each runs once on
torch's own threads, once inside ``one_torch_thread()`` and once as headlab runs it
(``one_torch_thread(when_busy=True)``: one thread only while another process competes),
alternating round by round (``side_by_side.interleaved``); ratio = torch's threads' median / the
way's, under the same load (> 1: faster). ``--load busy`` adds one competing CPU-bound process.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

import headlab.analysis.scenarios as scenarios
import headlab.heads.model_text_attention as text_attention
from headlab.attention.one_thread import one_torch_thread
from headlab.models import load
from machine_load import add_load_argument
from side_by_side import load_table, medians_per_load

BASELINE = "torch's threads"
TEXT = " ".join(["The quick brown fox jumps over the lazy dog near the river bank."] * 120)
TOKENS = {"minilm": 256, "smollm2": 1024}


def _on(way: str, work):
    """``work`` with headlab's one-thread blocks as they are, or turned off (torch's threads)."""

    def run():
        block = {  # called as headlab calls it, one_torch_thread(when_busy=True)
            "one thread": lambda **_: one_torch_thread(),
            "headlab (one when busy)": one_torch_thread,
        }.get(way, lambda **_: contextlib.nullcontext())
        scenarios.one_torch_thread = text_attention.one_torch_thread = block
        try:
            return work()
        finally:
            scenarios.one_torch_thread = text_attention.one_torch_thread = one_torch_thread

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=list(TOKENS), choices=list(TOKENS))
    add_load_argument(parser)
    args = parser.parse_args(argv)
    works = {"seed scenarios": lambda: scenarios.run_seed_scenarios(seed=0, draws=10)}
    for name in args.models:
        model = load(name)
        attend = text_attention.model_text_attention
        works[f"{name} {TOKENS[name]} tokens"] = functools.partial(
            attend, model, TEXT, max_tokens=TOKENS[name]
        )
    print(
        f"machine: {platform.processor() or platform.machine()}, torch threads "
        f"{torch.get_num_threads()}, torch {torch.__version__}"
    )
    for what, work in works.items():
        runs = {way: _on(way, work) for way in (BASELINE, "one thread", "headlab (one when busy)")}
        medians, seen = medians_per_load(runs, args.load, args.repeats)
        print(f"\n{what}, median of {args.repeats}, load average {', '.join(seen)}\n")
        print("\n".join(load_table(medians, BASELINE, 1, "calls")))


if __name__ == "__main__":
    main()

"""How long ``headlab.models.load`` takes for the packaged models, an earlier commit against this
tree, side by side in one run, each load in a fresh process.

    PYTHONPATH=src python benchmarks/bench_load.py bdecae3       # about 2 min on a quiet machine

Each child process first imports what any load needs (torch, transformers and the model classes
of both families, headlab's loaders), then times ``load(name)`` alone: the number the issue asks
for is the load "beyond the imports". What counts as an import is the same on both sides: the
modules every load imports before it reads a file (``import torch, transformers``,
``transformers.models.bert.modeling_bert`` and ``...llama.modeling_llama``, which import
``transformers.modeling_utils``, and ``headlab.models``); their time is printed beside
("imports"), so imports plus load is what a fresh process pays. The earlier commit is checked
out in a temporary git worktree (removed at the end) and run with its own ``src`` on PYTHONPATH.
Rounds alternate the order of the sides. Both sides share the machine's page cache: the first
round warms the files of both, so its samples are dropped when there is more than one round.

This tree's ``load("smollm2")`` reads the safetensors cache (``models/gguf_cache.py``); before the
measurement it is converted once (into ``$HEADLAB_CACHE``, else the user's cache) by a child of
its own, whose time is printed apart ("conversion, once").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fresh_process import run_child

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELS = ("smollm2", "minilm")

CHILD = """
import time
begun = time.perf_counter()
import json, sys, warnings
import torch, transformers
from transformers import AutoModel, AutoModelForCausalLM
from transformers.models.bert import modeling_bert
from transformers.models.llama import modeling_llama
import headlab.models
from headlab.models import load
torch.set_num_threads(int(sys.argv[2]))
warnings.simplefilter("ignore")
start = time.perf_counter()
model = load(sys.argv[1])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "imports": start - begun, "class": type(model).__name__}))
"""


def _child(src: Path, name: str, threads: int) -> dict:
    """One fresh process with ``src`` first on the path: {"seconds", "class"} of one load."""
    row, why = run_child(
        ["env", f"PYTHONPATH={src}", sys.executable, "-c", CHILD, name, str(threads)]
    )
    if row is None:
        raise SystemExit(f"load({name!r}) with {src} failed: {why}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="headlab-bench-load-") as tmp:
        old = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), args.rev],
            check=True,
        )
        try:
            sides = {args.rev: old / "src", "this tree": ROOT / "src"}
            if "smollm2" in args.models:
                start = time.perf_counter()
                _child(ROOT / "src", "smollm2", args.threads)
                print(
                    f"conversion, once (or the check of a cache already there), with the "
                    f"load: {time.perf_counter() - start:.1f} s",
                    flush=True,
                )
            samples = _measure(sides, args)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False
            )
    names = list(sides)
    print(
        f"\n| model | load {names[0]} (s) | load {names[1]} (s) | imports {names[0]} / "
        f"{names[1]} (s) | classes |"
    )
    print("| --- | --- | --- | --- | --- |")
    for model in args.models:
        a, b = (statistics.median(samples[(n, model)][0]) for n in names)
        i, j = (statistics.median(samples[(n, model)][2]) for n in names)
        classes = " / ".join(samples[(n, model)][1] for n in names)
        print(f"| {model} | {a:.2f} | {b:.2f} | {i:.2f} / {j:.2f} | {classes} |")
    print(
        f"\nmedian of {max(args.rounds - 1, 1)} rounds; load average at the end: {os.getloadavg()}"
    )
    return 0


def _measure(sides: dict[str, Path], args) -> dict:
    """(side, model) -> (load seconds of each kept round, the loaded class, imports seconds)."""
    samples: dict = {}
    order = list(sides)
    for round_ in range(args.rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:
            for model in args.models:
                row = _child(sides[name], model, args.threads)
                times, _, imports = samples.get((name, model), ([], "", []))
                if round_ or args.rounds == 1:
                    times.append(row["seconds"])
                    imports.append(row["imports"])
                samples[(name, model)] = (times, row["class"], imports)
                print(
                    f"round {round_ + 1}, {name}, {model}: {row['seconds']:.2f} s "
                    f"(imports {row['imports']:.2f} s)",
                    flush=True,
                )
    return samples


if __name__ == "__main__":
    raise SystemExit(main())

"""The score split at length on SmolLM2, side by side with a plain forward of the same tokens.

    python benchmarks/bench_score_split.py --length 2048 --repeats 2 --pairs-length 8192
    python benchmarks/bench_score_split.py --length 2048 --repeats 2 --skip memory --load both

Time (interleaved rounds, every other round in reverse order; CPU seconds of all threads and
wall seconds): a plain forward (the model's own, logits at the last position) against every
head's two marginals at the attended key of every query (``Sides`` = one forward keeping what
the split reads, then ``score_marginals.every_layer`` for every layer, at the kernel's scales,
the attention modules' own ``scaling``), each step timed; ``--load busy`` (or ``both``: quiet,
then busy) runs the rounds beside one competing CPU-bound process (``machine_load.competing``).
Memory (each in a fresh process, ``fresh_process.measure``: peak resident set during the call
above the resident set before it, the weights): a plain forward of ``--pairs-length`` tokens
against one head's pair matrix over every query at its attended key
(``score_pairs_streamed.pairs_over_queries``, layer ``--layer``, head ``--head``). Prints one
JSON document with the load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from fresh_process import measure, run_child
from machine_load import add_load_argument, competing, loads


def _ids(model, length: int) -> torch.Tensor:
    words = Path(__file__).parents[1].joinpath("README.md").read_text().split()
    ids = model.encode(" ".join(words))
    while len(ids) < length:
        ids = ids + ids[1:]
    return torch.tensor([ids[:length]])


def _forward(model):
    def run(ids):
        with torch.no_grad():
            return model.model(input_ids=ids, logits_to_keep=1).logits

    return run


def _timed(steps: dict, name: str, fn):
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    steps[name] = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
    return out


#: The parts of ``every_layer`` whose CPU and wall seconds the rounds add up (the floor).
PARTS = ("_plan", "_key_rows", "_block", "_some_block", "_many_block")


def _counted(module, kept: dict):
    """Wrap ``PARTS`` of ``module`` so that each call adds its seconds to ``kept``; returns a
    function that puts them back."""
    saved = {name: getattr(module, name) for name in PARTS}

    def wrap(name, fn):
        def counted(*args, **kwargs):
            cpu, wall = time.process_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                row = kept.setdefault(name, {"cpu": 0.0, "wall": 0.0})
                row["cpu"] += time.process_time() - cpu
                row["wall"] += time.perf_counter() - wall

        return counted

    for name, fn in saved.items():
        setattr(module, name, wrap(name, fn))
    return lambda: [setattr(module, name, fn) for name, fn in saved.items()]


def _marginals(model, steps: dict | None = None):
    from headlab.circuits import score_marginals
    from headlab.circuits.score_sides import Sides
    from headlab.models.hf.context_run import plain_scales

    def run(ids):
        kept = {} if steps is None else steps
        restore = _counted(score_marginals, kept.setdefault("parts", {}))
        try:
            with torch.no_grad():
                sides = _timed(kept, "sides", lambda: Sides(model, ids))
                scales = plain_scales(model)
                return _timed(
                    kept,
                    "every_layer",
                    lambda: sum(
                        got["key"].numel() for got in score_marginals.every_layer(sides, scales)
                    ),
                )
        finally:
            restore()

    return run


def _pairs(model, layer: int, head: int):
    from headlab.circuits.score_pairs_streamed import pairs_over_queries

    def run(ids):
        with torch.no_grad():
            return pairs_over_queries(model, ids, layer, head).matrix

    return run


def child(what: str, length: int, layer: int, head: int) -> None:
    from headlab.models import load

    torch.set_num_threads(2)
    model = load("smollm2")
    ids = _ids(model, length)
    fn = {
        "forward": lambda: _forward(model),
        "marginals": lambda: _marginals(model),
        "pairs": lambda: _pairs(model, layer, head),
    }[what]()
    _forward(model)(ids[:, :16])  # warm
    print(json.dumps({"what": what, "length": length, **measure(fn, ids)}))


def _rounds(model, ids, repeats: int) -> dict:
    """Interleaved rounds: name -> list of {"cpu", "wall"} (and the marginals' steps)."""
    got: dict = {"forward": [], "marginals": []}
    for round_ in range(repeats):
        order = ["forward", "marginals"] if round_ % 2 == 0 else ["marginals", "forward"]
        for name in order:
            steps: dict = {}
            fn = _forward(model) if name == "forward" else _marginals(model, steps)
            _timed(steps, "total", lambda fn=fn: fn(ids))
            got[name].append(steps)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--pairs-length", type=int, default=8192)
    parser.add_argument("--layer", type=int, default=29)
    parser.add_argument("--head", type=int, default=0)
    parser.add_argument("--skip", choices=["time", "memory"], default=None)
    parser.add_argument("--child", default=None)
    add_load_argument(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.length, args.layer, args.head)
        return
    from headlab.models import load

    out: dict = {"load_average_start": [round(x, 2) for x in os.getloadavg()]}
    if args.skip != "time":
        torch.set_num_threads(2)
        model = load("smollm2")
        ids = _ids(model, args.length)
        _forward(model)(ids[:, :16])  # warm
        out["time"] = {}
        for load in loads(args.load):
            with competing(load):
                before = [round(x, 2) for x in os.getloadavg()]
                rounds = _rounds(model, ids, args.repeats)
            median = {
                name: {
                    kind: statistics.median(r["total"][kind] for r in rows)
                    for kind in ("cpu", "wall")
                }
                for name, rows in rounds.items()
            }
            out["time"][load] = {
                "length": args.length,
                "load_average_before": before,
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "rounds": rounds,
                "median_s": median,
                "ratio": {
                    k: median["marginals"][k] / median["forward"][k] for k in ("cpu", "wall")
                },
            }
        del model
    if args.skip != "memory":
        memory = {}
        for what in ("forward", "pairs"):
            command = [sys.executable, __file__, "--child", what, "--length"]
            command += [
                str(args.pairs_length),
                "--layer",
                str(args.layer),
                "--head",
                str(args.head),
            ]
            row, why = run_child(command)
            memory[what] = row if row is not None else {"failed": why}
        peaks = {w: (r.get("peak", 0) - r.get("before", 0)) / 2**20 for w, r in memory.items()}
        out["memory"] = {
            "length": args.pairs_length,
            "layer": args.layer,
            "head": args.head,
            "rows": memory,
            "peak_above_weights_mib": peaks,
            "ratio": peaks["pairs"] / peaks["forward"] if peaks.get("forward") else None,
        }
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

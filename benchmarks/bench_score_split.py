"""The score split at length on SmolLM2, side by side with a plain forward of the same tokens.

    python benchmarks/bench_score_split.py --length 2048 --repeats 2

Time (interleaved rounds, medians): a plain forward (the model's own, logits at the last
position) against every head's two marginals at the attended key of every query
(``Sides`` = one forward keeping what the split reads, then ``attended_marginals`` for every
layer). Memory (each in a fresh process, ``fresh_process.measure``: peak resident set during
the call, loading excluded): the same forward against the same marginals. Prints one JSON
document with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from fresh_process import measure, run_child
from side_by_side import interleaved


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


def _marginals(model):
    from headlab.circuits.score_marginals import every_layer
    from headlab.circuits.score_sides import Sides, kernel_scale

    def run(ids):
        with torch.no_grad():
            sides = Sides(model, ids)
            scales = []
            for layer in range(sides.layers):
                probe = sides.clean_scores(layer, rows=slice(0, 32))
                scales.append(kernel_scale(probe["q"], probe["k"], probe["logits"]))
            return sum(got["key"].numel() for got in every_layer(sides, scales))

    return run


def child(what: str, length: int) -> None:
    from headlab.models import load

    torch.set_num_threads(2)
    model = load("smollm2")
    ids = _ids(model, length)
    fn = _forward(model) if what == "forward" else _marginals(model)
    _forward(model)(ids[:, :16])  # warm
    print(json.dumps({"what": what, **measure(fn, ids)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", default=None)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.length)
        return
    from headlab.models import load

    torch.set_num_threads(2)
    model = load("smollm2")
    ids = _ids(model, args.length)
    times = interleaved(
        {"forward": lambda: _forward(model)(ids), "marginals": lambda: _marginals(model)(ids)},
        repeats=args.repeats,
        warmup=0,
    )
    median = {name: statistics.median(t) / 1e3 for name, t in times.items()}
    memory = {}
    for what in ("forward", "marginals"):
        row, why = run_child(
            [sys.executable, __file__, "--child", what, "--length", str(args.length)]
        )
        memory[what] = row if row is not None else {"failed": why}
    peaks = {w: r.get("peak", 0) - r.get("before", 0) for w, r in memory.items()}
    print(
        json.dumps(
            {
                "length": args.length,
                "seconds": times,
                "median_s": median,
                "time_ratio": median["marginals"] / median["forward"],
                "memory": memory,
                "peak_above_weights_mb": {w: p / 2**20 for w, p in peaks.items()},
                "load_average": [round(x, 2) for x in os.getloadavg()],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

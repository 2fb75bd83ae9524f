"""The score split at length on SmolLM2, step by step in one process: CPU seconds (all threads)
and wall seconds of a plain forward, of ``Sides`` (one forward keeping what the split reads), of
the kernel scales, and of ``score_marginals.every_layer`` (every head's two marginals at the
attended key of every query, every layer). A quick companion of bench_score_split.py, whose
interleaved rounds and fresh processes a busy machine may not allow.

    python benchmarks/score_split_steps.py 2048
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_score_split import _forward, _ids


def timed(name: str, fn):
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    print(
        f"{name}: cpu {time.process_time() - cpu:.1f} s, wall {time.perf_counter() - wall:.1f} s",
        flush=True,
    )
    return out


def main() -> None:
    from headlab.circuits.score_marginals import every_layer
    from headlab.circuits.score_sides import Sides, kernel_scale
    from headlab.models import load

    torch.set_num_threads(2)
    length = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    model = load("smollm2")
    ids = _ids(model, length)
    _forward(model)(ids[:, :16])  # warm
    print(f"length {length}, load average {os.getloadavg()[0]:.1f}", flush=True)
    timed("forward", lambda: _forward(model)(ids))
    with torch.no_grad():
        sides = timed("sides", lambda: Sides(model, ids))

        def scales():
            out = []
            for layer in range(sides.layers):
                probe = sides.clean_scores(layer, rows=slice(0, 32))
                out.append(kernel_scale(probe["q"], probe["k"], probe["logits"]))
            return out

        found = timed("scales", scales)
        timed("marginals", lambda: [got["key"].sum() for got in every_layer(sides, found)])
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

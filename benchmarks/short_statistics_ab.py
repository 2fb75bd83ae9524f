"""bench_three_ways.py's task at a short length, headlab and TransformerLens in one process,
their runs interleaved: the CPU time of each call, medians and their ratio.

On cores shared with other work a fresh process per tool (bench_three_ways.py) sees the load
change between the two; here both alternate round by round on one thread, and the process's
CPU time of each call is compared, which moves less with the load than the wall time. The
scores of the two are checked equal (float32 rounding) first.

    PYTHONPATH=src python benchmarks/short_statistics_ab.py --length 256 --rounds 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from bench_three_ways import (
    _gguf,
    load_headlab,
    load_transformer_lens,
    repeated_ids,
    run_headlab,
    run_transformer_lens,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", default=None, help="SmolLM2's GGUF (default: the packaged one)")
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    gguf = Path(_gguf(args))
    tools = {
        "headlab": (load_headlab(gguf), run_headlab),
        "transformer_lens": (load_transformer_lens(gguf), run_transformer_lens),
    }
    ids, n = repeated_ids(args.length), args.length // 2
    cpu: dict[str, list[float]] = {tool: [] for tool in tools}
    with torch.inference_mode():
        scores = {tool: run(loaded, ids, n) for tool, (loaded, run) in tools.items()}
        pairs = zip(scores["headlab"], scores["transformer_lens"], strict=True)
        worst = max((a - b).abs().max().item() for a, b in pairs)  # first, induction
        print(f"largest difference of the scores: {worst:.1e}")
        for _ in range(args.rounds):
            for tool, (loaded, run) in tools.items():
                start = time.process_time()
                run(loaded, ids, n)
                cpu[tool].append(time.process_time() - start)
    for tool, values in cpu.items():
        print(
            f"{tool}: median CPU {statistics.median(values):.3f} s of "
            f"{', '.join(f'{v:.3f}' for v in values)}"
        )
    ratio = statistics.median(cpu["headlab"]) / statistics.median(cpu["transformer_lens"])
    print(f"headlab / transformer_lens: {ratio:.3f}x CPU at {args.length} tokens")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

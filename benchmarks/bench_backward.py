"""Forward + backward of one causal attention layer with soft-capped logits, three ways.

    PYTHONPATH=src python benchmarks/bench_backward.py --threads 2 --lengths 1024 2048 4096

Gemma 2's shapes (8 query heads of 64 on 4 K/V heads, soft-cap 50), random q, k, v, causal,
one text; the gradient of sum(head_out * upstream) with respect to q, k and v:

- ``sdpa``: torch's fused attention without the soft-cap (SDPA cannot cap): the floor, what the
  same layer costs when nothing needs the score matrix.
- ``explicit``: headlab's kernel holding the whole (head, q_pos, k_pos) scores and weights for
  autograd (what every tool that shows weights runs; headlab's path below 16 MiB of weights).
- ``recomputed``: headlab's kernel on its chunked path, the backward recomputing each chunk's
  weights (``attention.chunked.RecomputedAttention``), as it runs above 16 MiB.

Each (way, length) runs in a fresh process (``fresh_process.measure``): peak resident memory
above what the process held before the call, and the call's time after one warm-up call;
with ``--load busy`` a competing CPU-bound process runs beside every child.
"""

from __future__ import annotations

import argparse
import json
import sys

from fresh_process import run_child
from machine_load import add_load_argument, competing, loads

HEADS, KV_HEADS, D_HEAD, SOFTCAP = 8, 4, 64, 50.0
WAYS = ("sdpa", "explicit", "recomputed")


def child(way: str, length: int, threads: int | None) -> dict:
    import torch
    import torch.nn.functional as F

    import headlab.attention.kernel as kernel
    from fresh_process import measure
    from headlab.attention.mask_spec import MaskSpec

    if threads:
        torch.set_num_threads(threads)
    kernel.MIN_RECOMPUTED = 2**62 if way == "explicit" else kernel.MIN_RECOMPUTED
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, length, D_HEAD, generator=g).requires_grad_()
    k, v = (torch.randn(1, KV_HEADS, length, D_HEAD, generator=g).requires_grad_() for _ in "kv")
    upstream = torch.randn(1, HEADS, length, D_HEAD, generator=g)

    def step(_):
        if way == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            options = kernel.AttendOptions(softcap=SOFTCAP)
            out = kernel.attend(q, k, v, MaskSpec(causal=True), options).head_out
        return torch.autograd.grad(out, (q, k, v), upstream)

    step(None)
    return {"way": way, "length": length, **measure(step, None)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--child", nargs=2, metavar=("WAY", "LENGTH"), help=argparse.SUPPRESS)
    add_load_argument(parser)
    args = parser.parse_args(argv)
    if args.child:
        row = child(args.child[0], int(args.child[1]), args.threads)
        print(json.dumps(row))
        return 0
    if any(n < 2 for n in args.lengths):
        parser.error(f"--lengths must be >= 2, got {args.lengths}")
    threads = ["--threads", str(args.threads)] if args.threads else []
    print(
        f"one causal layer, {HEADS} heads on {KV_HEADS} K/V heads of {D_HEAD}, soft-cap "
        f"{SOFTCAP:g}, forward + backward, fresh process each"
    )
    print("| load | tokens | way | seconds | / sdpa | peak above start (MiB) | / sdpa |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for load in loads(args.load):
        for length in args.lengths:
            rows = {}
            for way in WAYS:
                with competing(load):
                    row, why = run_child(
                        [sys.executable, __file__, "--child", way, str(length), *threads]
                    )
                rows[way] = row
                if row is None:
                    print(f"| {load} | {length} | {way} | failed: {why} | | | |")
                    continue
                base = rows["sdpa"]
                mib = (row["peak"] - row["before"]) / 2**20
                time_ratio = mem_ratio = ""
                if base is not None:
                    time_ratio = f"{row['seconds'] / base['seconds']:.2f}"
                    mem_ratio = f"{mib / max((base['peak'] - base['before']) / 2**20, 1e-9):.2f}"
                print(
                    f"| {load} | {length} | {way} | {row['seconds']:.3f} | {time_ratio} | "
                    f"{mib:.0f} | {mem_ratio} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

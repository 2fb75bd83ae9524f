"""The floor under streamed statistics: one causal attention layer, three ways, side by side.

    PYTHONPATH=src python benchmarks/statistics_floor.py --threads 2 --length 8192

SmolLM2's shapes (9 query heads of 64 on 3 K/V heads), random q, k, v, causal, no grad:

- ``sdpa``: torch's fused ``scaled_dot_product_attention`` (what a plain forward runs). It never
  writes a weight to memory.
- ``weights``: the same product in chunks of query rows with every weight written once: scores,
  the causal mask, softmax, values, and nothing else. No statistic can be computed for less.
- ``statistics``: headlab's kernel (``attention.kernel.attend``) streaming every per-head
  statistic of ``model heads`` (entropy, max weight, self, previous, distance, received).

Each is called once per round, every other round in reverse order; medians over ``--repeats``
rounds after one warm-up call; ratios against ``sdpa``.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.mask_spec import MaskSpec
from headlab.attention.streaming_sums import CHUNK_ELEMENTS, StatisticsRequest
from side_by_side import interleaved

HEADS, KV_HEADS, D_HEAD = 9, 3, 64


def weights_only(q, k, v, chunk_elements: int = CHUNK_ELEMENTS) -> torch.Tensor:
    """Causal attention a chunk of query rows at a time, each chunk's weights written once."""
    _, heads, length, d = q.shape
    groups = k.shape[1]
    rows = max(1, chunk_elements // (heads * length))
    out = torch.empty_like(q)
    for start in range(0, length, rows):
        stop = min(length, start + rows)
        grouped = q[:, :, start:stop].reshape(1, groups, heads // groups * (stop - start), d)
        s = grouped @ k[:, :, :stop].transpose(-1, -2)  # (1, group, member x rows, keys)
        s = s.view(1, heads, stop - start, stop).mul_(d**-0.5)
        later = torch.arange(start, stop)[:, None] < torch.arange(stop)[None, :]
        s.masked_fill_(later, float("-inf"))
        torch.softmax(s, dim=-1, out=s)
        o = s.view(1, groups, -1, stop) @ v[:, :, :stop]  # (1, group, member x rows, d)
        out[:, :, start:stop] = o.view(1, heads, stop - start, d)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.length < 2 or args.repeats < 1:
        parser.error(f"--length must be >= 2 and --repeats >= 1, got {args.length}, {args.repeats}")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    q = torch.randn(1, HEADS, args.length, D_HEAD)
    k, v = (torch.randn(1, KV_HEADS, args.length, D_HEAD) for _ in range(2))
    request = StatisticsRequest(report=lambda sums: None)
    steps = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        "weights": lambda: weights_only(q, k, v),
        "statistics": lambda: attend(
            q, k, v, MaskSpec(causal=True), AttendOptions(statistics=request)
        ),
    }
    with torch.inference_mode():
        times = interleaved(steps, args.repeats, warmup=1)  # ms
    base = statistics.median(times["sdpa"])
    print(
        f"one causal layer, {HEADS} heads on {KV_HEADS} K/V heads, {args.length} tokens, "
        f"{torch.get_num_threads()} threads, median of {args.repeats}"
    )
    print("| route | seconds | / sdpa |")
    print("| --- | --- | --- |")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median / 1e3:.3f} | {median / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

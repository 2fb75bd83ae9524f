"""The floor under the default path (need_weights=True, inference): four calls side by side.

    PYTHONPATH=src python benchmarks/default_path_floor.py --threads 2 [--allocator steady]

Self-attention of one input (default batch 8 x 256 tokens x 512 wide, 8 heads), eval mode,
inside torch.inference_mode(), the same weights everywhere:

- ``torch default``: torch.nn.MultiheadAttention(x, x, x), need_weights=True (its native path).
- ``headlab default``: headlab.MultiHeadAttention, the same call.
- ``floor, blocks``: the same outputs with nothing but the operations they need
  (``floor_blocks``): the input projection, then per batch element and block of query rows
  the scaled scores (one ``baddbmm``), the softmax in place, the values and the mean over
  heads, then the output projection. No checks, no masks, no copies of K or V: headlab's
  blocked loop without headlab.
- ``floor, whole``: the same with every tensor whole (``floor_whole``): torch's own order of
  operations (all heads' scores in one ``baddbmm``), without its other passes.
- ``projections``: the two projections alone (the GEMMs every implementation runs).

Each call once per round, every other round in reverse order; medians over ``--repeats``
rounds after ``--warmup`` calls of each. "/ floor" = median / the faster floor's median; torch
/ that floor is the ceiling: the most an implementation of the default path made of torch's
kernels can gain over torch here. "faults" = minor page faults per call (``getrusage``):
pages the allocator had handed back to the system and the call touched again.

``--allocator steady`` keeps freed memory in the process (``allocator.py``). By default (the
allocator as a user's process has it), one call's frees can make the next call, of another
implementation, fault in fresh pages, and which one pays depends on the order.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

import allocator
from headlab import MultiHeadAttention
from headlab.attention.chunked import BLOCK_ELEMENTS, MIN_ROWS
from side_by_side import interleaved


def _split(x: torch.Tensor, module: torch.nn.MultiheadAttention) -> list[torch.Tensor]:
    """q, k, v (batch, head, pos, d), strided views of one input projection of x."""
    batch, length, embed = x.shape
    heads = module.num_heads
    qkv = F.linear(x, module.in_proj_weight, module.in_proj_bias)  # (batch, pos, 3 E)
    qkv = qkv.view(batch, length, 3, heads, embed // heads)
    return [qkv[:, :, i].transpose(1, 2) for i in range(3)]


def floor_blocks(
    x: torch.Tensor,
    module: torch.nn.MultiheadAttention,
    block_elements: int = BLOCK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output (batch, pos, E), weights averaged over heads (batch, pos, pos)) of ``module``'s
    self-attention on x (batch, pos, E), batch first, a block of query rows at a time (the
    kernel's block sizes; K and V copied contiguous once where several blocks read them)."""
    batch, length, embed = x.shape
    heads = module.num_heads
    d = embed // heads
    q, k, v = _split(x, module)
    rows = min(length, max(min(MIN_ROWS, length), block_elements // (heads * length)))
    if rows < length:
        k, v = k.contiguous(), v.contiguous()
    out = x.new_empty(batch, length, heads, d)
    mean = x.new_empty(batch, length, length)
    zero = x.new_zeros(())
    for b in range(batch):
        for start in range(0, length, rows):
            stop = min(length, start + rows)
            s = torch.baddbmm(
                zero.expand(heads, stop - start, length),
                q[b, :, start:stop],
                k[b].transpose(-2, -1),
                beta=0.0,
                alpha=d**-0.5,
            )
            torch.softmax(s, dim=-1, out=s)
            out[b, start:stop] = torch.bmm(s, v[b]).transpose(0, 1)
            torch.mean(s, dim=0, out=mean[b, start:stop])
    return F.linear(
        out.view(batch, length, embed), module.out_proj.weight, module.out_proj.bias
    ), mean


def floor_whole(
    x: torch.Tensor, module: torch.nn.MultiheadAttention
) -> tuple[torch.Tensor, torch.Tensor]:
    """``floor_blocks`` with whole tensors: every head's scores in one product."""
    batch, length, embed = x.shape
    heads = module.num_heads
    d = embed // heads
    q, k, v = (t.reshape(batch * heads, length, d) for t in _split(x, module))
    s = torch.baddbmm(
        x.new_zeros(()).expand(batch * heads, length, length),
        q,
        k.transpose(-2, -1),
        beta=0.0,
        alpha=d**-0.5,
    )
    torch.softmax(s, dim=-1, out=s)
    out = torch.bmm(s, v).view(batch, heads, length, d).transpose(1, 2).reshape(x.shape)
    mean = s.view(batch, heads, length, length).mean(dim=1)
    return F.linear(out, module.out_proj.weight, module.out_proj.bias), mean


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--embed", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    allocator.add_argument(parser)
    args = parser.parse_args(argv)
    sizes = (args.batch, args.seq, args.embed, args.heads, args.repeats)
    if min(sizes) < 1 or args.warmup < 0 or args.embed % args.heads:
        parser.error(
            f"sizes and --repeats must be >= 1 and --heads must divide --embed, got "
            f"batch {args.batch}, seq {args.seq}, embed {args.embed}, heads "
            f"{args.heads}, repeats {args.repeats}"
        )
    allocator.use(args.allocator)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours = MultiHeadAttention(args.embed, args.heads, batch_first=True).eval()
    theirs = torch.nn.MultiheadAttention(args.embed, args.heads, batch_first=True).eval()
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(args.batch, args.seq, args.embed)
    head_outputs = torch.randn(args.batch, args.seq, args.embed)

    def projections() -> None:
        F.linear(x, theirs.in_proj_weight, theirs.in_proj_bias)
        theirs.out_proj(head_outputs)

    steps = {
        "torch default": lambda: theirs(x, x, x),
        "headlab default": lambda: ours(x, x, x),
        "floor, blocks": lambda: floor_blocks(x, theirs),
        "floor, whole": lambda: floor_whole(x, theirs),
        "projections": projections,
    }
    faults: dict[str, list[int]] = {}
    with torch.inference_mode():
        expected = theirs(x, x, x)
        for name in ("headlab default", "floor, blocks", "floor, whole"):
            for got, want in zip(steps[name](), expected, strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        times = interleaved(steps, args.repeats, args.warmup, faults)
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = min(medians["floor, blocks"], medians["floor, whole"])
    print(
        f"batch {args.batch} x {args.seq} tokens x {args.embed} wide, {args.heads} heads, "
        f"{torch.get_num_threads()} threads, {args.allocator} allocator, median of "
        f"{args.repeats}"
    )
    print("| call | median ms | / floor | faults |")
    print("| --- | --- | --- | --- |")
    for name, median in medians.items():
        per_call = statistics.mean(faults[name])
        print(f"| {name} | {median:.1f} | {median / floor:.3f} | {per_call:.0f} |")
    ours_ms, torch_ms = medians["headlab default"], medians["torch default"]
    print(f"torch / headlab {torch_ms / ours_ms:.3f}; ceiling torch / floor {torch_ms / floor:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

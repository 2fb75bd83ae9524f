"""Speed of headlab.MultiHeadAttention against torch.nn.MultiheadAttention and the Annotated
Transformer's implementation: forward+backward (training) and inference forward, side by side.

    PYTHONPATH=src python benchmarks/bench_attention.py [--repeats 7] [--quick] [--json-out F]

Every implementation runs self-attention on the same input with the same weights, batch first.
Training: train mode (dropout 0), forward then backward of (out * g).sum() into the parameters.
Inference: eval mode inside torch.inference_mode(); that is the configuration in which torch's
module takes its native fast path (batch_first, eval, no grad, query is key is value, packed
in_proj, even head count): its best case. Whether it was taken is checked with the profiler and
printed. Times are medians over --repeats rounds after --warmup calls, each round calling every
implementation once in turn (side_by_side.interleaved: load changes hit all alike); speedup =
torch / headlab (>= 1.0: headlab at least as fast), for the fast path (need_weights=False)
against torch's need_weights=False, and for the default (need_weights=True) against torch's
default.

In training the script also times the fast path's kernels alone (``kernel_floor_step``: the
GEMMs and torch's flash attention forward and backward, no module, no autograd); torch fast /
floor = "ceiling", the largest fast-path speedup over torch that torch's kernels leave room for.

Then the cost of inspection: ``trace()`` (every intermediate per head) against the plain
need_weights=True forward on the same module and input, eval mode, no grad, at batch 4 x 512
tokens x 512 wide, 8 heads (--quick: the quick size); ratio = trace / forward (target <= 2).

"faults" = minor page faults per call: pages that the C allocator had handed back to the system
(after another implementation's frees, say) and the call touched again; ``--allocator steady``
keeps freed memory in the process (``allocator.py``).

``--load busy`` measures while one other CPU-bound process runs (benchmarks/machine_load.py: a
single-threaded Python loop started here, bounded in time, stopped at the end): users' machines
are rarely idle, and fine-grained parallel work can fall behind there. ``--load both`` measures
quiet, then busy, in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

import allocator
from annotated_mha import AnnotatedMultiHeadAttention
from headlab import MultiHeadAttention
from machine_load import add_load_argument, competing, load_average, loads
from side_by_side import interleaved


@dataclass(frozen=True)
class Size:
    name: str
    batch: int
    seq: int
    embed: int
    heads: int


FULL = (Size("b8-s256-e512-h8", 8, 256, 512, 8), Size("b1-s2048-e768-h12", 1, 2048, 768, 12))
QUICK = (Size("quick-b2-s32-e64-h4", 2, 32, 64, 4),)
TRACE_SIZE = Size("b4-s512-e512-h8", 4, 512, 512, 8)

# name -> (module kind, need_weights); None: the Annotated module has no such switch.
IMPLS = {
    "headlab fast (need_weights=False)": ("headlab", False),
    "torch fast (need_weights=False)": ("torch", False),
    "headlab default (need_weights=True)": ("headlab", True),
    "torch default (need_weights=True)": ("torch", True),
    "annotated transformer": ("annotated", None),
}
RATIOS = (
    ("fast path", "headlab fast (need_weights=False)", "torch fast (need_weights=False)"),
    ("default", "headlab default (need_weights=True)", "torch default (need_weights=True)"),
)
# Training only: the fast path's kernels alone (see kernel_floor_step); "ceiling" = torch fast /
# floor, the largest fast-path speedup that torch's own kernels leave room for.
FLOOR = "kernels alone (floor, fast path)"
CEILING = ("ceiling", FLOOR, "torch fast (need_weights=False)")


@dataclass(frozen=True)
class Result:
    """One measurement: times in milliseconds, one per repeat."""

    size: str
    mode: str  # "train" (forward+backward) or "inference"
    impl: str
    median_ms: float
    times_ms: list[float]
    faults: float = 0.0  # minor page faults per call, mean over the repeats (allocator.py)


def build_modules(size: Size) -> dict[str, torch.nn.Module]:
    """The three modules with the same weights (torch's initialisation, seed 0)."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(size.embed, size.heads, batch_first=True)
    theirs = torch.nn.MultiheadAttention(size.embed, size.heads, batch_first=True)
    theirs.load_state_dict(ours.state_dict())
    annotated = AnnotatedMultiHeadAttention(size.heads, size.embed)
    e = size.embed
    with torch.no_grad():
        for i, lin in enumerate(annotated.linears[:3]):
            lin.weight.copy_(ours.in_proj_weight[i * e : (i + 1) * e])
            lin.bias.copy_(ours.in_proj_bias[i * e : (i + 1) * e])
        annotated.linears[3].load_state_dict(ours.out_proj.state_dict())
    return {"headlab": ours, "torch": theirs, "annotated": annotated}


def make_call(module: torch.nn.Module, kind: str, need_weights: bool | None, x: torch.Tensor):
    if kind == "annotated":
        return lambda: module(x, x, x)[0]
    return lambda: module(x, x, x, need_weights=need_weights)[0]


def check_same_outputs(modules: dict[str, torch.nn.Module], x: torch.Tensor) -> None:
    """Guard: a benchmark of different computations would mean nothing."""
    with torch.inference_mode():
        ref = modules["torch"].eval()(x, x, x, need_weights=False)[0]
        for name, (kind, nw) in IMPLS.items():
            out = make_call(modules[kind].eval(), kind, nw, x)()
            if not torch.allclose(out, ref, rtol=1e-4, atol=1e-5):
                raise RuntimeError(f"{name} disagrees with torch: {(out - ref).abs().max():.3g}")


def torch_took_native_fast_path(module: torch.nn.Module, x: torch.Tensor, need_weights: bool):
    """Whether torch's MultiheadAttention calls torch._native_multi_head_attention (inference).

    torch looks the function up on the torch namespace at call time, so counting calls through a
    temporary wrapper tells which path ran without a profiler.
    """
    original = torch._native_multi_head_attention
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    module.eval()
    torch._native_multi_head_attention = counting
    try:
        with torch.inference_mode():
            module(x, x, x, need_weights=need_weights)
    finally:
        torch._native_multi_head_attention = original
    return bool(calls)


def kernel_floor_step(module: MultiHeadAttention, x: torch.Tensor, g: torch.Tensor):
    """One training step of the fast path as bare kernels, with no module and no autograd: the
    packed projection (one GEMM), torch's CPU flash attention forward, the output projection, then
    by hand the gradients of both weight matrices (GEMMs) and the flash kernel's own backward.

    This is the least any implementation built on torch's kernels can do for the same step, so
    torch fast / floor is the most such an implementation can gain over torch (the ceiling)."""
    batch, seq, embed = x.shape
    heads = module.num_heads
    w_in, b_in = module.in_proj_weight.detach(), module.in_proj_bias.detach()
    w_o, b_o = module.out_proj.weight.detach(), module.out_proj.bias.detach()
    x2, g2 = x.reshape(-1, embed), g.reshape(-1, embed)  # (batch * pos, E)
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

    def to_heads(t: torch.Tensor) -> torch.Tensor:  # (batch * pos, E) -> (batch, H, pos, D)
        return t.view(batch, seq, heads, -1).transpose(1, 2)

    def step() -> tuple[torch.Tensor, torch.Tensor]:
        qkv = torch.addmm(b_in, x2, w_in.t())  # (batch * pos, 3E)
        q, k, v = (to_heads(t) for t in qkv.split(embed, dim=-1))
        o, lse = flash(q, k, v)  # o (batch, H, pos, D)
        head_out = o.transpose(1, 2).reshape(-1, embed)  # (batch * pos, E)
        torch.addmm(b_o, head_out, w_o.t())  # the output; its gradient is g
        d_w_o, _ = g2.t().mm(head_out), g2.sum(0)  # dW_O, db_O
        d_o = to_heads(g2.mm(w_o))
        d_q, d_k, d_v = flash_backward(d_o, q, k, v, o, lse, 0.0, False)
        d_qkv = torch.cat([d.transpose(1, 2).reshape(-1, embed) for d in (d_q, d_k, d_v)], 1)
        d_w_in, _ = d_qkv.t().mm(x2), d_qkv.sum(0)  # dW_in, db_in
        return d_w_in, d_w_o

    check_floor(module, x, g, step)
    return step


def check_floor(module, x, g, step) -> None:
    """Guard: the floor's weight gradients are autograd's (else it would time another step)."""
    module.train().zero_grad(set_to_none=True)
    (module(x, x, x, need_weights=False)[0] * g).sum().backward()
    wants = (module.in_proj_weight.grad, module.out_proj.weight.grad)
    for got, want in zip(step(), wants, strict=True):
        if not torch.allclose(got, want, rtol=1e-3, atol=1e-3):
            raise RuntimeError(f"kernel floor disagrees with autograd: {(got - want).abs().max()}")
    module.zero_grad(set_to_none=True)


def measure(size: Size, repeats: int, warmup: int) -> tuple[list[Result], dict[str, bool]]:
    modules = build_modules(size)
    x = torch.randn(size.batch, size.seq, size.embed)
    check_same_outputs(modules, x)
    native = {
        f"need_weights={nw}": torch_took_native_fast_path(modules["torch"], x, nw)
        for nw in (False, True)
    }
    g = torch.randn(size.batch, size.seq, size.embed)
    results = []
    for mode in ("train", "inference"):
        steps = {}
        for name, (kind, nw) in IMPLS.items():
            module = modules[kind].train(mode == "train")
            call = make_call(module, kind, nw, x)

            def train_step(module=module, call=call) -> None:
                module.zero_grad(set_to_none=True)
                (call() * g).sum().backward()

            def infer_step(call=call) -> None:
                with torch.inference_mode():
                    call()

            steps[name] = train_step if mode == "train" else infer_step
        if mode == "train":
            steps[FLOOR] = kernel_floor_step(modules["headlab"], x, g)
        faults: dict[str, list[int]] = {}
        for name, times in interleaved(steps, repeats, warmup, faults).items():
            per_call = statistics.mean(faults[name])
            results.append(Result(size.name, mode, name, statistics.median(times), times, per_call))
    return results, native


def measure_trace(size: Size, repeats: int, warmup: int) -> list[Result]:
    """trace() and the need_weights=True forward, alternating repeat by repeat (eval, no grad)."""
    module = build_modules(size)["headlab"].eval()
    x = torch.randn(size.batch, size.seq, size.embed)
    calls = {
        "headlab forward (need_weights=True)": lambda: module(x, x, x, need_weights=True),
        "headlab trace()": lambda: module.trace(x),
    }
    with torch.no_grad():
        times = interleaved(calls, repeats, warmup)
    return [
        Result(size.name, "inspection", name, statistics.median(t), t) for name, t in times.items()
    ]


def ratios(results: list[Result]) -> list[dict]:
    """speedup = torch median / headlab median, per size, mode and comparison."""
    by_key = {(r.size, r.mode, r.impl): r.median_ms for r in results}
    out = []
    for size, mode in dict.fromkeys((r.size, r.mode) for r in results if r.mode != "inspection"):
        for label, ours, theirs in RATIOS + ((CEILING,) if mode.startswith("train") else ()):
            speedup = by_key[(size, mode, theirs)] / by_key[(size, mode, ours)]
            out.append({"size": size, "mode": mode, "comparison": label, "speedup": speedup})
    return out


def print_table(results: list[Result], speedups: list[dict], console: Console) -> None:
    table = Table(title="median ms per call (lower is better)")
    for col in ("size", "mode", "implementation"):
        table.add_column(col)
    for col in ("median ms", "min ms", "faults"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            r.size,
            r.mode,
            r.impl,
            f"{r.median_ms:.2f}",
            f"{min(r.times_ms):.2f}",
            f"{r.faults:.0f}",
        )
    console.print(table)
    table = Table(title="speedup = torch / headlab (>= 1.0: headlab at least as fast)")
    for col in ("size", "mode", "comparison", "speedup"):
        table.add_column(col)
    for s in speedups:
        style = "green" if s["speedup"] >= 1.0 else ("yellow" if s["speedup"] >= 0.9 else "red")
        table.add_row(s["size"], s["mode"], s["comparison"], f"[{style}]{s['speedup']:.2f}[/]")
    console.print(table)


def write_json_atomic(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f, indent=2)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per measurement")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--only", choices=[s.name for s in FULL], help="one full size only")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--json-out", type=Path, help="also write the results as JSON")
    add_load_argument(parser)
    allocator.add_argument(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error(f"--repeats must be >= 1 and --warmup >= 0, got {args.repeats}, {args.warmup}")
    allocator.use(args.allocator)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else tuple(s for s in FULL if args.only in (None, s.name))
    console = Console()
    machine = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }
    console.print(machine)
    results, native = [], {}
    trace_size = QUICK[0] if args.quick else TRACE_SIZE
    for load in loads(args.load):
        tag = "" if args.load == "quiet" else f" ({load})"
        with competing(load):
            for size in sizes:
                console.print(f"measuring {size}{tag} (load average {load_average():.1f}) ...")
                res, native[size.name] = measure(size, args.repeats, args.warmup)
                results += [replace(r, mode=r.mode + tag) for r in res]
            if args.only is None and load == "quiet":
                console.print(f"measuring trace() at {trace_size} ...")
                results += measure_trace(trace_size, args.repeats, args.warmup)
    speedups = ratios(results)
    print_table(results, speedups, console)
    inspection = {r.impl: r.median_ms for r in results if r.mode == "inspection"}
    if inspection:
        trace_cost = (
            inspection["headlab trace()"] / inspection["headlab forward (need_weights=True)"]
        )
        console.print(
            f"trace() / forward(need_weights=True) at {trace_size.name}: {trace_cost:.2f}"
        )
    console.print(f"torch inference took its native fast path: {native}")
    if args.json_out:
        payload = {
            "machine": machine,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "sizes": [asdict(s) for s in sizes],
            "torch_native_fast_path": native,
            "results": [asdict(r) for r in results],
            "speedups": speedups,
            "trace_over_forward": trace_cost if inspection else None,
            "load": args.load,
            "allocator": args.allocator,
        }
        write_json_atomic(args.json_out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

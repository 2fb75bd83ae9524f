"""Every head's statistics at long context: streaming against a plain forward and the weights.

    PYTHONPATH=src python benchmarks/bench_long_context.py                 # SmolLM2, CPU:
        transformers' own SDPA forward against headlab's routes, 2048 and 8192
    PYTHONPATH=src python benchmarks/bench_long_context.py --bare          # one module, 32k
    PYTHONPATH=src python benchmarks/bench_long_context.py --device cuda   # on a GPU
    PYTHONPATH=src python benchmarks/bench_long_context.py --random-llama  # a random 4-layer
        Llama built by transformers, 32768 positions: SDPA against headlab, 8192 and 32768

Every model runs on the one route (transformers' model class on headlab's attention,
docs/transformers.md); ``--backend``, which chose between it and the hand-built decoder, is
accepted for old command lines with a one-line note that it no longer chooses anything.

Each (route, length) runs in a fresh Python process, one after the other, so that its peak
memory is its own (benchmarks/fresh_process.py): on the CPU the process's peak resident set
during the run (VmHWM, reset just before it) and its resident set just before the run (the weights
and the interpreter); on a GPU torch's peak allocated memory. Routes (long_context_routes.py):

  sdpa          transformers' own forward of the same model, loaded with
                attn_implementation="sdpa", logits included: the baseline
  sdpa-body     the same without the logits (transformers' body)
  forward       the model's own forward through headlab's attention, logits included: what a
                user runs
  streaming     ``headlab.heads.model_head_sums.model_head_sums`` (what ``long_text_statistics``
                runs): every head's statistics and heavy-hitter profile, weights reduced
                chunk by chunk
  roles         the same pass with every role score of ``long_text_statistics`` on top: window
                errors (4 sinks + 256), copy positions, blocked maps (what ``model heads
                --max-tokens`` runs since head roles exist)
  plan          the model's forward under a KV plan that windows half of its K/V groups
                (4 sinks + 256): one verification run of ``model kv-budget``
  materialised  ``headlab.heads.tracing.attention_weights``: every layer's full weights kept,
                as tools that read attention weights do (TransformerLens, nnsight,
                output_attentions); run only where its estimate fits in half the machine's
                memory

A route that fails (an out-of-memory kill, an analysis that refuses) is reported in one line and
the others go on. The summary compares ``streaming`` and ``roles`` with the baseline (``sdpa``
where it runs, else ``sdpa-body``, else ``forward``) against the bounds of ``BOUNDS``, and
``heads`` with ``sdpa-body`` against ``HEADS_BOUNDS`` (issue 30: ``model heads`` at 8192 within
1.2x the peak of the body's SDPA forward, which computes no logits).

With ``--bare``: one ``MultiHeadAttention`` (12 heads, embed 768, no mask), its fused forward
against ``attention_statistics`` on random input. ``--random-weights``: SmolLM2's shapes with
random weights and random token ids (same work; the device machine cannot take the 98 MB GGUF).
``--threads N`` pins torch's threads. Times are one run each after a warm-up call at a short
length; the machine's load average is printed with the table. ``--load busy`` runs every child
while one other CPU-bound process runs (``machine_load.competing``, held by this parent across
the children of one length), ``--load both`` each length's routes quiet and then busy: the
ratios are against the baseline at the same length and load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

from fresh_process import measure, run_child
from long_context_routes import (
    MODEL_ROUTES,
    SDPA_ROUTES,
    Spec,
    bare_runs,
    materialised_bytes,
    route_runs,
)
from machine_load import add_load_argument, competing, load_average, loads

ROUTES = (*SDPA_ROUTES, *MODEL_ROUTES)
#: What --backend took; it no longer chooses anything.
RETIRED_BACKENDS = ("headlab", "transformers")
COMPARED = ("streaming", "roles", "heads")
#: (memory, time) bounds of the compared routes against the baseline, None: not bounded.
BOUNDS = {
    "bare": (2.0, None),
    "smollm2": (1.3, 2.0),  # issue 22: SmolLM2 through transformers at 8192
    "random-llama": (1.3, None),  # issue 22: "within the same memory bound" at 32768
}
#: ``heads`` (what ``model heads`` runs) against ``sdpa-body``, whatever the baseline: issue 30.
HEADS_BOUNDS = (1.2, None)


def spec_of(args) -> Spec:
    model = (
        "random-llama"
        if args.random_llama
        else ("smollm2-random" if args.random_weights else "smollm2")
    )
    return Spec(model, args.device, args.chunk_elements)


def _child(route: str, length: int, args) -> dict:
    import torch

    torch.manual_seed(0)
    if args.bare:
        runs, x, warm = bare_runs(length, args.device, args.chunk_elements)
        fn = runs[route]
    else:
        fn, x, warm = route_runs(route, spec_of(args), length)
    with torch.inference_mode():
        fn(warm)
        row = measure(fn, x, args.device)
    return {"route": route, "length": length, **row}


def _fits(route: str, length: int, model: str | None) -> bool:
    """The materialised route only where its weights take at most half of this machine."""
    if route != "materialised":
        return True
    from headlab.limits import machine_memory

    return 2 * materialised_bytes(model, length) <= machine_memory() / 2


def baseline(routes: list[str]) -> str:
    """transformers' own SDPA forward where it runs (with logits, else its body), else
    headlab's forward."""
    return next((r for r in ("sdpa", "sdpa-body") if r in routes), "forward")


def bounds_key(args) -> str:
    if args.bare:
        return "bare"
    return "random-llama" if args.random_llama else "smollm2"


def load_of(row: dict) -> str:
    """The load a row was measured under (rows from before ``--load`` existed: quiet)."""
    return row.get("load", "quiet")


def reference(rows: list[dict], row: dict, base: str) -> dict | None:
    """The baseline's row at ``row``'s length and load, None when it failed or did not run."""
    return next(
        (
            r
            for r in rows
            if r["route"] == base
            and r["length"] == row["length"]
            and load_of(r) == load_of(row)
            and "failed" not in r
        ),
        None,
    )


def verdicts(rows: list[dict], base: str, bounds: tuple[float, float | None]) -> list[str]:
    """One line per compared row: its peak and time over the baseline's at the same length and
    load, against ``bounds`` (memory, time or None)."""
    lines = []
    for row in rows:
        if row["route"] not in COMPARED:
            continue
        against, (memory_bound, time_bound) = (
            ("sdpa-body", HEADS_BOUNDS) if row["route"] == "heads" else (base, bounds)
        )
        busy = "" if load_of(row) == "quiet" else f" ({load_of(row)})"
        where = f"{row['route']} at {row['length']}{busy}"
        ref = reference(rows, row, against)
        if "failed" in row or ref is None:
            why = "failed" if "failed" in row else "no " + against
            lines.append(f"{where}: not compared ({why})")
            continue
        memory = row["peak"] / ref["peak"]
        seconds = row["seconds"] / ref["seconds"]
        within = memory <= memory_bound and (time_bound is None or seconds <= time_bound)
        time_text = f"time {seconds:.2f}x" + (f" (bound {time_bound:g}x)" if time_bound else "")
        lines.append(
            f"{where}: peak {memory:.2f}x {against} (bound {memory_bound:g}x), {time_text}: "
            + ("within" if within else "OVER")
        )
    return lines


def cpu_text(row: dict) -> str:
    """The row's CPU seconds (all threads), "-" for a row measured before they were."""
    return f"{row['cpu_seconds']:.3g}" if "cpu_seconds" in row else "-"


def table(rows: list[dict], base: str) -> list[str]:
    """The markdown table of docs/benchmarks.md: ratios against ``base`` at the same length and
    load; a load column when a row was measured busy."""
    loaded = any(load_of(row) != "quiet" for row in rows)
    first = "| length | load " if loaded else "| length "
    lines = [
        f"{first}| route | seconds | cpu s | peak GiB | peak / {base} | time / {base} |",
        "| --- " * (8 if loaded else 7) + "|",
    ]
    for row in rows:
        start = f"| {row['length']} | {load_of(row)} " if loaded else f"| {row['length']} "
        if "failed" in row:
            lines.append(f"{start}| {row['route']} | failed | - | - | - | - |")
            continue
        ref = reference(rows, row, base)
        ratio_mem = f"{row['peak'] / ref['peak']:.2f}" if ref else "-"
        ratio_time = f"{row['seconds'] / ref['seconds']:.2f}" if ref else "-"
        lines.append(
            f"{start}| {row['route']} | {row['seconds']:.3g} | {cpu_text(row)} | "
            f"{row['peak'] / 2**30:.2f} | {ratio_mem} | {ratio_time} |"
        )
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=None)
    parser.add_argument("--bare", action="store_true")
    parser.add_argument(
        "--backend",
        choices=RETIRED_BACKENDS,
        default=None,
        help="retired: chooses nothing (one route)",
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument(
        "--random-llama",
        action="store_true",
        help="a random 4-layer Llama (transformers), 32768 positions",
    )
    parser.add_argument("--chunk-elements", type=int, default=2**22)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json-out", default=None)
    add_load_argument(parser)
    parser.add_argument("--child", nargs=2, metavar=("ROUTE", "LENGTH"), help=argparse.SUPPRESS)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments, with the routes and lengths their combination implies."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.backend is not None and not args.child:
        print(
            f"bench_long_context: --backend {args.backend} no longer chooses anything: every "
            "model runs on the one route (docs/transformers.md)",
            file=sys.stderr,
        )
    if args.bare and set(SDPA_ROUTES) & set(args.routes or ()):
        parser.error("--bare is one headlab module: it has no transformers SDPA forward")
    if args.routes is None:
        args.routes = (
            ["forward", "streaming", "materialised"]
            if args.bare
            else ["sdpa", "forward", "streaming", "roles"]
        )
    if args.lengths is None:
        args.lengths = (
            [2048, 8192, 32768]
            if args.bare
            else [8192, 32768]
            if args.random_llama
            else [2048, 8192]
        )
    return args


def child_command(route: str, length: int, args) -> list[str]:
    """The command line of one (route, length) child: this script, with the parent's flags."""
    command = [
        sys.executable,
        __file__,
        "--child",
        route,
        str(length),
        "--device",
        args.device,
        "--chunk-elements",
        str(args.chunk_elements),
    ]
    flags = {
        "--bare": args.bare,
        "--random-weights": args.random_weights,
        "--random-llama": args.random_llama,
    }
    command += [flag for flag, on in flags.items() if on]
    return command + (["--threads", str(args.threads)] if args.threads else [])


def measure_routes(length: int, load: str, model: str | None, args) -> list[dict]:
    """The rows of every route at ``length``, one fresh child each, printed as they come."""
    rows = []
    tag = "" if args.load == "quiet" else f" {load:5s}"
    for route in args.routes:
        if args.bare and route in ("roles", "plan"):
            continue  # the bare module has no model
        if not _fits(route, length, model):
            print(
                f"{route:12s} {length:6d}{tag}  skipped: weights over half the memory", flush=True
            )
            continue
        row, why = run_child(child_command(route, length, args))
        if row is None:
            rows.append({"route": route, "length": length, "load": load, "failed": why})
            print(f"{route:12s} {length:6d}{tag}  failed: {why}", flush=True)
            continue
        rows.append({**row, "route": route, "length": length, "load": load})
        print(
            f"{route:12s} {length:6d}{tag}  {row['seconds']:8.3g} s  (cpu {cpu_text(row)} s)  "
            f"peak {row['peak'] / 2**30:6.2f} GiB  (before the run {row['before'] / 2**30:.2f})",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(_child(args.child[0], int(args.child[1]), args)))
        return
    model = None if args.bare else spec_of(args).model
    rows, seen = [], {name: [] for name in loads(args.load)}
    for length in args.lengths:
        for load in loads(args.load):
            with competing(load):  # runs through every child of this load
                seen[load].append(load_average())
                rows += measure_routes(length, load, model, args)
                seen[load].append(load_average())
    what = "bare module" if args.bare else f"{model}, one route"
    averages = ", ".join(f"{n} {min(a):.1f} to {max(a):.1f}" for n, a in seen.items())
    print(
        f"\n{what}; machine: {platform.machine()}, {os.cpu_count()} cores, device {args.device}, "
        f"load average {averages} (at the start and end of each length's routes)"
    )
    base = baseline(args.routes)
    print("\n".join(table(rows, base)))
    print("\n".join(verdicts(rows, base, BOUNDS[bounds_key(args)])))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(
                {
                    "device": args.device,
                    "bare": args.bare,
                    "model": model,
                    "rows": rows,
                    "load": args.load,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()

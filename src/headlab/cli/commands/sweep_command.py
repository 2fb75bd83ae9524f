"""``headlab sweep``: train small models across head counts, then print the summary."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import typer

from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.cli.sweep_tables import summary_tables
from headlab.results.locations import SWEEP_RESULTS

if TYPE_CHECKING:  # pragma: no cover
    from headlab.experiments.sweep import SweepPlan

# SweepRequest's and the executors' arguments, which their errors name, are this command's flags
SWEEP_FLAGS = (
    "task",
    "heads",
    "d_model",
    "layers",
    "seeds",
    "steps",
    "kv_heads",
    "head_dim",
    "attention",
    "workers",
    "executor",
    "address",
    "out",
)


def run_name(config) -> str:
    """How the progress bar names a run: its head split and its seed."""
    kv = "" if config.num_kv_heads == config.num_heads else f", {config.num_kv_heads} K/V"
    return f"h={config.num_heads}{kv} d_head={config.head_dim} seed {config.seed}"


def _run_with_progress(plan: SweepPlan, *, executor: str, workers: int, address: str | None) -> int:
    """Run the plan's remaining configs under a progress bar; return how many finished.

    The bar (stderr, a terminal only) counts finished runs and shows the last loss reported,
    naming the run it belongs to. Ctrl-C: says what was saved, then re-raises (exit 130).
    """
    from headlab.experiments.sweep import run_sweep

    if not plan.todo:
        return 0
    names = {c.run_id: run_name(c) for c in plan.todo}
    done = 0
    try:
        with progress("sweep: runs", len(plan.todo)) as update:

            def on_eval(run_id: str, step: int, loss: float) -> None:
                update(detail=f"loss {loss:.3f} at step {step} of {names.get(run_id, run_id)}")

            for _ in run_sweep(
                plan, executor=executor, workers=workers, address=address, on_eval=on_eval
            ):
                done += 1
                update(done)
    except KeyboardInterrupt:
        print(
            f"headlab: interrupted; {done} runs of this session saved in {plan.out}; "
            "run the same command again to resume",
            file=sys.stderr,
        )
        raise  # the entry point turns it into exit 130
    return done


def sweep(
    ctx: typer.Context,
    task: str = typer.Option("multi-lookup", "--task", help="multi-lookup, recall or induction."),
    heads: str = typer.Option("1,2,4,8,16", "--heads", help="Head counts, comma separated."),
    d_model: int = typer.Option(64, "--d-model", help="Model width (fixed across head counts)."),
    layers: int = typer.Option(1, "--layers", help="Transformer blocks."),
    seeds: int = typer.Option(3, "--seeds", help="Seeds 0..N-1 per head count."),
    steps: int = typer.Option(800, "--steps", help="Training steps per run."),
    kv_heads: str = typer.Option("", "--kv-heads", help="K/V head counts (GQA), comma separated."),
    head_dim: int = typer.Option(
        0, "--head-dim", help="Head size; 0 = d_model / heads (equal parameters)."
    ),
    attention: str = typer.Option(
        "plain", "--attention", help="plain, or talking-heads (Shazeer et al. 2020)."
    ),
    workers: int = typer.Option(2, "--workers", help="Local worker processes."),
    executor: str = typer.Option("local", "--executor", help="local or ray."),
    address: str = typer.Option("", "--address", help="Ray cluster address (default: local)."),
    out: str = typer.Option(str(SWEEP_RESULTS), "--out", help="Results file (JSONL, appended)."),
) -> None:
    """Run a sweep (resumable: finished runs in --out are skipped), then print the summary."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console

    from headlab.experiments.executors import capped_workers, check_executor, check_reachable
    from headlab.experiments.sweep import SweepRequest, check_runs_fit, plan_sweep
    from headlab.results.jsonl_store import read_rows
    from headlab.results.sweep_summary import summarize

    if executor not in ("local", "ray"):
        raise ValueError(f"--executor must be local or ray, got {executor!r}")
    with flags(*SWEEP_FLAGS):
        check_executor(executor, address)
    spec = SweepRequest(
        task=task,
        heads=tuple(int_list(heads, "--heads") or ()),
        d_model=d_model,
        layers=layers,
        seeds=seeds,
        steps=steps,
        kv_heads=tuple(int_list(kv_heads, "--kv-heads") or ()) or None,
        head_dim=head_dim or None,
        attention=attention,
    )
    with flags(*SWEEP_FLAGS):
        capped_workers(workers, 1)
        if executor == "ray" and address:
            check_reachable(address)  # Ray itself would retry an unreachable address for minutes
        plan = plan_sweep(spec, out)  # every config and --out validated before any training
        workers = capped_workers(workers, len(plan.todo))
        check_runs_fit(plan.todo, executor=executor, workers=workers)
    print(
        f"sweep {task}: {len(plan.configs)} runs, {plan.skipped} already finished in "
        f"{plan.out} (skipped), {len(plan.todo)} to run on {workers} worker(s)",
        flush=True,
    )
    start = time.perf_counter()
    with flags(*SWEEP_FLAGS):
        done = _run_with_progress(plan, executor=executor, workers=workers, address=address or None)
    print(f"{done} runs in {time.perf_counter() - start:.1f} s; results in {plan.out}")
    wanted = {c.run_id for c in plan.configs}
    rows = [r for r in read_rows(plan.out) if r["run_id"] in wanted]
    Console().print(*summary_tables(summarize(rows), f"{task}: final metrics over seeds"))


def register(group: typer.Typer) -> None:
    """Make this command the ``sweep`` group's own (``headlab sweep``; ``headlab.cli.app``)."""
    group.callback(invoke_without_command=True)(sweep)

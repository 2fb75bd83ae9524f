"""A sweep: the grid of RunConfigs, validated before anything trains, run resumably.

``expand_grid`` checks every configuration first (a bad one raises ValueError, one line, before
any training); ``run_sweep`` skips run_ids already finished in the results file, runs the rest on
an executor and appends each run's rows as it finishes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from headlab.attention.sizes import FREE_HEAD_DIM, check_divides
from headlab.experiments.executors import OnEval, execute
from headlab.experiments.run_sizing import make_config, run_memory_estimate
from headlab.experiments.sweep_tasks import get_task
from headlab.limits import check_fits, check_int
from headlab.results.jsonl_store import finished_run_ids
from headlab.results.jsonl_writer import ResultsWriter, check_appendable
from headlab.results.locations import SWEEP_RESULTS
from headlab.results.run_config import RunConfig
from headlab.results.training_run import RunResult

DEFAULT_OUT = SWEEP_RESULTS
MAX_RUNS = 10_000  # a grid larger than this is a typo (each run trains for seconds to minutes)
# A spawned worker holds Python, torch and headlab before its first run (measured: 268 MiB).
WORKER_START = 300 * 2**20


@dataclass(frozen=True)
class SweepRequest:
    """The grid: every head count x K/V head count x seed, with the rest fixed.

    ``kv_heads`` None means G = H (full multi-head); otherwise each G must divide each H.
    ``head_dim`` None means d_model / H (equal parameters across H).
    """

    task: str = "multi-lookup"
    heads: tuple[int, ...] = (1, 2, 4, 8, 16)
    d_model: int = 64
    layers: int = 1
    seeds: int = 3
    steps: int = 800
    kv_heads: tuple[int, ...] | None = None
    head_dim: int | None = None
    attention: str = "plain"  # or "talking-heads"
    training: dict = field(default_factory=dict)  # other RunConfig fields (batch_size, lr, ...)


def expand_grid(spec: SweepRequest) -> list[RunConfig]:
    """All RunConfigs of the sweep, each validated; ValueError on the first that cannot run."""
    get_task(spec.task)
    if not spec.heads:
        raise ValueError("heads must list at least one head count, got none")
    check_int("seeds", spec.seeds, high=MAX_RUNS)
    check_int("steps", spec.steps, high=10**7)
    check_int("d_model", spec.d_model, high=2**14)
    check_int("layers", spec.layers, high=256)
    runs = len(spec.heads) * len(spec.kv_heads or (None,)) * spec.seeds
    if runs > MAX_RUNS:
        raise ValueError(f"a sweep holds at most {MAX_RUNS} runs, got {runs}")
    configs = []
    for h in spec.heads:
        for g in spec.kv_heads or (None,):
            if g is not None:
                check_divides("heads", h, "kv_heads", g)
            if spec.head_dim is None:
                check_divides("d_model", spec.d_model, "heads", h, FREE_HEAD_DIM)
            for seed in range(spec.seeds):
                configs.append(
                    make_config(
                        spec.task,
                        h,
                        d_model=spec.d_model,
                        layers=spec.layers,
                        seed=seed,
                        steps=spec.steps,
                        num_kv_heads=g,
                        head_dim=spec.head_dim,
                        attention=spec.attention,
                        **spec.training,
                    )
                )
    return configs


@dataclass
class SweepPlan:
    """What a sweep will do: all configs, and those still to run (not finished in ``out``)."""

    configs: list[RunConfig]
    todo: list[RunConfig]
    out: Path

    @property
    def skipped(self) -> int:
        return len(self.configs) - len(self.todo)


def _unfinished(configs: list[RunConfig], rows: list[dict]) -> list[RunConfig]:
    done = finished_run_ids(rows)
    seen: set[str] = set()
    todo = []
    for c in configs:
        if c.run_id not in done and c.run_id not in seen:
            seen.add(c.run_id)
            todo.append(c)
    return todo


def plan_sweep(spec: SweepRequest, out: str | Path = DEFAULT_OUT) -> SweepPlan:
    """Validate the grid and ``out``, and read ``out`` to find the finished runs (resume).

    ValueError (one line) for a bad grid or an output path headlab may not append results to;
    both before anything trains.
    """
    configs = expand_grid(spec)
    out = Path(out)
    content = check_appendable(out)
    return SweepPlan(configs=configs, todo=_unfinished(configs, content.rows), out=out)


def check_runs_fit(configs: list[RunConfig], *, executor: str = "local", workers: int = 1) -> None:
    """ValueError with the estimate (``limits.check_fits``) when the runs that ``workers`` local
    processes hold at once would not fit in memory: the largest run's ``run_memory_estimate``
    times the runs at once, plus each spawned worker's own start-up. Ray runs elsewhere: its
    machines are not this one's to judge."""
    if not configs or executor != "local":
        return
    largest = max(configs, key=run_memory_estimate)
    at_once = min(workers, len(configs))
    start = WORKER_START * at_once if at_once > 1 else 0
    heads = f"{largest.num_heads} head{'s' if largest.num_heads > 1 else ''}"
    check_fits(
        f"{at_once} run(s) at once of d_model={largest.d_model}, layers={largest.layers}, {heads} "
        f"(the largest of this sweep)",
        at_once * run_memory_estimate(largest) + start,
        f"lower d_model={largest.d_model}, layers={largest.layers} or workers={workers}",
    )


def run_sweep(
    plan: SweepPlan,
    *,
    executor: str = "local",
    workers: int = 1,
    address: str | None = None,
    on_eval: OnEval | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> Iterator[RunResult]:
    """Run the plan's remaining configs; each result's rows are appended as soon as it arrives.

    A generator: iterate it to drive the sweep. Interrupting it (Ctrl-C) loses only the runs in
    flight; the file holds whole lines of every finished run. ValueError before any run when
    the runs held at once would not fit in memory (``check_runs_fit``).
    """
    check_runs_fit(plan.todo, executor=executor, workers=workers)
    with ResultsWriter(plan.out) as writer:  # locked: another sweep into it is refused
        # Read again under the lock: runs that finished since planning are not run twice.
        todo = _unfinished(plan.todo, writer.read().rows)
        for result in execute(
            todo, executor=executor, workers=workers, address=address, on_eval=on_eval
        ):
            writer.append(result.rows())
            if on_result is not None:
                on_result(result)
            yield result

"""Where runs execute: a local process pool (default) or a Ray cluster.

An executor takes RunConfigs and yields RunResults as they finish (any order). ``run_one`` is a
pure function of its config, so the executors only move configs out and results back. Progress
events ``(run_id, step, loss)`` reach ``on_eval`` while runs train (local pool only; on Ray the
loss shown is that of the last finished run).
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

from headlab.experiments.config import RunConfig
from headlab.experiments.train import RunResult, run_one

OnEval = Callable[[str, int, float], None]


def _drain(events: queue_module.Queue | None, on_eval: OnEval | None) -> None:
    if events is None or on_eval is None:
        return
    while True:
        try:
            on_eval(*events.get_nowait())
        except queue_module.Empty:
            return


def _run_reporting(config: RunConfig, events: queue_module.Queue | None) -> RunResult:
    return run_one(config, None if events is None else lambda *event: events.put(event))


def run_local(
    configs: list[RunConfig], *, workers: int = 1, on_eval: OnEval | None = None
) -> Iterator[RunResult]:
    """Run on ``workers`` processes (spawned, one torch thread each); workers=1 runs inline.

    On KeyboardInterrupt the queued runs are cancelled and the pool shut down; runs already
    yielded are the caller's to have saved.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1:
        for config in configs:
            yield run_one(config, on_eval)
        return
    # spawn, not fork: the parent has torch (and its thread pools) initialised already.
    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager() if on_eval is not None else None
    events = manager.Queue() if manager is not None else None
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    pending: set[Future] = set()
    try:
        pending = {pool.submit(_run_reporting, c, events) for c in configs}
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(events, on_eval)
            for future in done:
                yield future.result()
    finally:
        if pending:
            # Interrupted (Ctrl-C, or the consumer stopped early): the runs in flight are lost
            # anyway, so stop their processes instead of waiting for them at exit.
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        if manager is not None:
            manager.shutdown()


def run_ray(
    configs: list[RunConfig], *, address: str | None = None, on_eval: OnEval | None = None
) -> Iterator[RunResult]:
    """Run each config as a Ray task (1 CPU each) on the cluster at ``address``.

    Connects with ``ray.init(address=...)`` unless Ray is initialised already (then that
    instance is used and left running). Needs the optional extra ``ray``.
    """
    try:
        import ray
    except ImportError:
        raise ValueError(
            "--executor ray needs the optional extra: pip install 'headlab[ray]'"
        ) from None
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(run_one)
    pending = [remote.remote(c) for c in configs]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                result = ray.get(ref)
                if on_eval is not None:
                    on_eval(result.config.run_id, result.final.step, result.final.loss)
                yield result
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def execute(
    configs: list[RunConfig],
    *,
    executor: str = "local",
    workers: int = 1,
    address: str | None = None,
    on_eval: OnEval | None = None,
) -> Iterator[RunResult]:
    """Dispatch to ``run_local`` or ``run_ray``; ValueError for an unknown executor."""
    if executor == "local":
        return run_local(configs, workers=workers, on_eval=on_eval)
    if executor == "ray":
        return run_ray(configs, address=address, on_eval=on_eval)
    raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")

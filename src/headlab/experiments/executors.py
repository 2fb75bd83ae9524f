"""Where runs execute: a local process pool (default) or a Ray cluster.

An executor takes RunConfigs and yields RunResults as they finish (any order). ``run_one`` is a
pure function of its config, so the executors only move configs out and results back. Progress
events ``(run_id, step, loss)`` reach ``on_eval`` while runs train (local pool only; on Ray the
loss shown is that of the last finished run).
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

from headlab.experiments.config import RunConfig
from headlab.experiments.train import RunResult, run_one

OnEval = Callable[[str, int, float], None]


class WorkerDied(RuntimeError):
    """A worker process died (killed, out of memory) while running; the sweep stopped cleanly."""


def capped_workers(workers: int, runs: int) -> int:
    """``workers`` capped at the machine's cores and at the number of runs (at least 1).

    More processes than cores only share the same cores (each run uses one torch thread).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return max(1, min(workers, os.cpu_count() or 1, runs))


def _drain(events: queue_module.Queue | None, on_eval: OnEval | None) -> None:
    if events is None or on_eval is None:
        return
    while True:
        try:
            on_eval(*events.get_nowait())
        except queue_module.Empty:
            return
        except (EOFError, OSError):  # the process that carries progress events was killed
            raise WorkerDied(
                "the sweep's progress process died; every finished run is saved; run the same "
                "command again to resume"
            ) from None


def _run_reporting(config: RunConfig, events: queue_module.Queue | None) -> RunResult:
    return run_one(config, None if events is None else lambda *event: events.put(event))


@contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """Processes started inside ignore Ctrl-C (an ignored signal stays ignored across exec).

    Ctrl-C reaches the whole process group; the parent alone handles it and terminates its
    workers, so no worker prints a KeyboardInterrupt traceback from the middle of its imports.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


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
    with _children_ignore_sigint():
        manager = ctx.Manager() if on_eval is not None else None
    events = manager.Queue() if manager is not None else None
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    pending: dict[Future, RunConfig] = {}
    started: list = []
    try:
        with _children_ignore_sigint():  # the pool starts its processes on the first submits
            pending = {pool.submit(_run_reporting, c, events): c for c in configs}
        started = list((getattr(pool, "_processes", None) or {}).values())
        while pending:
            done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(events, on_eval)
            if not done:
                _check_alive(started, pending.values())
            for future in done:
                config = pending.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool:
                    raise WorkerDied(
                        f"a worker process died while running {config.run_id} "
                        f"({config.task}, {config.num_heads} heads, seed {config.seed}); the runs "
                        "in flight are lost, every finished run is saved; run the same command "
                        "again to resume"
                    ) from None
                yield result
    finally:
        if pending:
            # Interrupted (Ctrl-C, SIGTERM, a dead worker, or the consumer stopped early): the
            # runs in flight are lost anyway, so stop their processes instead of waiting.
            _stop(started)
        pool.shutdown(wait=False, cancel_futures=True)
        if manager is not None:
            manager.shutdown()


def _check_alive(processes: list, in_flight: Iterable[RunConfig]) -> None:
    """WorkerDied when one of the pool's processes has exited while runs are in flight.

    The pool notices a dead worker itself in most cases (BrokenProcessPool); this also covers a
    worker killed right after it started, which CPython's pool can miss and then wait forever.
    """
    for process in processes:
        if process.exitcode is not None:
            names = ", ".join(c.run_id for c in in_flight)
            raise WorkerDied(
                f"a worker process (pid {process.pid}) died with exit code {process.exitcode}; "
                f"runs not finished: {names}; every finished run is saved; run the same command "
                "again to resume"
            )


def _stop(processes: list, grace: float = 5.0) -> None:
    """Terminate ``processes``, then kill any still alive after ``grace`` seconds."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=grace)
        if process.is_alive():
            process.kill()


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
            "executor=ray needs the optional extra: pip install 'headlab[ray]'"
        ) from None
    if not ray.is_initialized():
        if address not in (None, "", "auto", "local"):
            check_reachable(address)
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


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """ValueError unless something accepts TCP connections at ``address`` ([ray://]host:port).

    Ray itself retries an unreachable address for minutes; this answers in ``timeout`` seconds.
    """
    host_port = address.split("://", 1)[-1]
    host, sep, port = host_port.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address must be host:port or ray://host:port, got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as error:
        raise ValueError(
            f"address={address} does not answer ({error.strerror or error}; "
            f"tried for {timeout:.0f} s)"
        ) from None


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

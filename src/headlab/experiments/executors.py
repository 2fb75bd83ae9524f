"""Where jobs execute: a local process pool (default) or a Ray cluster.

An executor takes a job function and its jobs and yields the results as they finish (any
order). The function is pure (its result depends on its job alone) and importable by name, so
the executors only move jobs out and results back: ``run_one`` (a sweep's training run, its
RunConfig the job) and ``corpus_roles.run_document`` (one document's head sums) are two.
``function(job, report)``: ``report``, when given, takes progress events from inside the job
(local pool only). A worker is a long-lived process, so a function may keep what every job
needs (a model) in the process between jobs.

For the sweep, ``execute`` runs RunConfigs: progress events ``(run_id, step, loss)`` reach
``on_eval`` while runs train (local pool only; on Ray the loss shown is that of the last finished
run).
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
from multiprocessing.managers import SyncManager
from typing import Any, TypeVar

from headlab.experiments.lifetime import die_with_parent, initializer_args
from headlab.experiments.train import run_one
from headlab.results.run_config import RunConfig
from headlab.results.training_run import RunResult

OnEval = Callable[[str, int, float], None]
Job = TypeVar("Job")
Result = TypeVar("Result")
EXECUTORS = ("local", "ray")


class WorkerDied(RuntimeError):
    """A worker process died (killed, out of memory) while running; the sweep stopped cleanly."""


def capped_workers(workers: int, runs: int) -> int:
    """``workers`` capped at the machine's cores and at the number of runs (at least 1).

    More processes than cores only share the same cores (each run uses one torch thread).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return max(1, min(workers, os.cpu_count() or 1, runs))


def _drain(events: queue_module.Queue | None, on_event: Callable | None) -> None:
    if events is None or on_event is None:
        return
    while True:
        try:
            on_event(*events.get_nowait())
        except queue_module.Empty:
            return
        except (EOFError, OSError):  # the process that carries progress events was killed
            raise WorkerDied(
                "the progress process died; every finished job is saved; run the same "
                "command again to resume"
            ) from None


def _run_reporting(
    function: Callable[..., Result], job: Any, events: queue_module.Queue | None
) -> Result:
    if events is None:
        return function(job)
    return function(job, _Reporter(events))


class _Reporter:
    """A job's ``report``: puts progress events on the manager's queue. When the manager is gone
    the events are dropped (the parent notices and says so in one line); the job goes on."""

    def __init__(self, events: queue_module.Queue) -> None:
        self.events: queue_module.Queue | None = events

    def __call__(self, *event: object) -> None:
        if self.events is None:
            return
        try:
            self.events.put(event)
        except (OSError, EOFError):
            self.events = None


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


def run_jobs_local(
    function: Callable[..., Result],
    jobs: list[Job],
    *,
    workers: int = 1,
    on_event: Callable | None = None,
    describe: Callable[[Job], str] = str,
) -> Iterator[Result]:
    """``function(job)`` for every job on ``workers`` processes (spawned, long-lived: a process
    runs job after job); workers=1 runs inline. on_event(*event): the events a job reports.
    describe(job): how a message names a job (a worker that died while running it).

    On KeyboardInterrupt, a dead worker or a consumer that stops early, the queued jobs are
    cancelled and the pool's processes stopped; results already yielded are the caller's to
    have saved. An exception a job raises is raised here (the same type and message). The pool's
    processes and the progress manager end with this process, even when it is killed
    (``lifetime.die_with_parent``).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1:
        for job in jobs:
            yield function(job) if on_event is None else function(job, on_event)
        return
    # spawn, not fork: the parent has torch (and its thread pools) initialised already.
    ctx = multiprocessing.get_context("spawn")
    lifetime = {"initializer": die_with_parent, "initargs": initializer_args()}
    manager = None
    if on_event is not None:
        manager = SyncManager(ctx=ctx)
        with _children_ignore_sigint():
            manager.start(**lifetime)
    events = manager.Queue() if manager is not None else None
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, **lifetime)
    pending: dict[Future, Job] = {}
    started: list = []
    try:
        with _children_ignore_sigint():  # the pool starts its processes on the first submits
            pending = {pool.submit(_run_reporting, function, j, events): j for j in jobs}
        started = list((getattr(pool, "_processes", None) or {}).values())
        while pending:
            done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(events, on_event)
            if not done:
                _check_alive(started, pending.values(), describe)
            for future in done:
                job = pending.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool:
                    raise WorkerDied(
                        f"a worker process died while running {describe(job)}; the jobs in "
                        "flight are lost, every finished one is saved; run the same command "
                        "again to resume"
                    ) from None
                yield result
    finally:
        if pending:
            # Interrupted (Ctrl-C, SIGTERM, a dead worker, a failed job, or the consumer stopped
            # early): the jobs in flight are lost anyway, so stop their processes instead of
            # waiting.
            _stop(started)
        pool.shutdown(wait=False, cancel_futures=True)
        if manager is not None:
            manager.shutdown()


def run_local(
    configs: list[RunConfig], *, workers: int = 1, on_eval: OnEval | None = None
) -> Iterator[RunResult]:
    """The sweep's runs on ``workers`` processes (one torch thread each); workers=1 runs inline
    (``run_jobs_local`` of ``run_one``)."""
    return run_jobs_local(run_one, configs, workers=workers, on_event=on_eval, describe=_run_name)


def _run_name(config: RunConfig) -> str:
    return f"{config.run_id} ({config.task}, {config.num_heads} heads, seed {config.seed})"


def _check_alive(processes: list, in_flight: Iterable, describe: Callable[..., str]) -> None:
    """WorkerDied when one of the pool's processes has exited while jobs are in flight (named
    by ``describe``).

    The pool notices a dead worker itself in most cases (BrokenProcessPool); this also covers a
    worker killed right after it started, which CPython's pool can miss and then wait forever.
    """
    for process in processes:
        if process.exitcode is not None:
            raise WorkerDied(
                f"a worker process (pid {process.pid}) died with exit code {process.exitcode}; "
                f"not finished: {', '.join(map(describe, in_flight))}; every finished job is "
                "saved; run the same command again to resume"
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


def run_jobs_ray(
    function: Callable[..., Result], jobs: list[Job], *, address: str | None = None
) -> Iterator[Result]:
    """``function(job)`` for every job as a Ray task (1 CPU each) on the cluster at ``address``.

    Connects with ``ray.init(address=...)`` unless Ray is initialised already (then that
    instance is used and left running). Ray reuses its worker processes from task to task, so
    what a function keeps in its process (a model) serves the next job there too. An exception
    a job raises is raised here as itself (not wrapped in Ray's RayTaskError). Needs the
    optional extra ``ray``.
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
    remote = ray.remote(num_cpus=1)(function)
    pending = [remote.remote(j) for j in jobs]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as error:
                    if isinstance(error.cause, Exception):
                        raise error.cause from None
                    raise
                yield result
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def run_ray(
    configs: list[RunConfig], *, address: str | None = None, on_eval: OnEval | None = None
) -> Iterator[RunResult]:
    """The sweep's runs as Ray tasks (``run_jobs_ray`` of ``run_one``); ``on_eval`` gets the
    final loss of each run as it finishes."""
    for result in run_jobs_ray(run_one, configs, address=address):
        if on_eval is not None:
            on_eval(result.config.run_id, result.final.step, result.final.loss)
        yield result


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


def run_jobs(
    function: Callable[..., Result],
    jobs: list[Job],
    *,
    executor: str = "local",
    workers: int = 1,
    address: str | None = None,
    describe: Callable[[Job], str] = str,
) -> Iterator[Result]:
    """Dispatch to ``run_jobs_local`` or ``run_jobs_ray``; ValueError for an unknown executor
    (or an address without Ray)."""
    check_executor(executor, address)
    if executor == "ray":
        return run_jobs_ray(function, jobs, address=address)
    return run_jobs_local(function, jobs, workers=workers, describe=describe)


def check_executor(executor: str, address: str | None = None) -> str:
    """``executor`` if it is one of EXECUTORS; ValueError naming them otherwise, and when an
    ``address`` (a Ray cluster's) comes with another executor: the work would run here instead."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    if address and executor != "ray":
        raise ValueError(
            f"address={address} is for executor=ray, got executor={executor}: the work would "
            "run on this machine, not on the cluster (pass both, or neither)"
        )
    return executor


def execute(
    configs: list[RunConfig],
    *,
    executor: str = "local",
    workers: int = 1,
    address: str | None = None,
    on_eval: OnEval | None = None,
) -> Iterator[RunResult]:
    """The sweep's ``run_local`` or ``run_ray``; ValueError for an unknown executor (or an
    address without Ray)."""
    if check_executor(executor, address) == "ray":
        return run_ray(configs, address=address, on_eval=on_eval)
    return run_local(configs, workers=workers, on_eval=on_eval)

"""Training sweeps across head counts at an equal parameter budget: tasks, runs, executors.

The public names below are imported on first use (PEP 562): a sweep's worker processes unpickle
their initializer (``lifetime.die_with_parent``) from this package, and it must arm the
parent-death signal before torch is imported, not after (on a busy machine that import takes
tens of seconds, in which a killed sweep's workers would live on).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "make_config": "headlab.experiments.run_sizing",
    "SweepRequest": "headlab.experiments.sweep",
    "expand_grid": "headlab.experiments.sweep",
    "plan_sweep": "headlab.experiments.sweep",
    "run_sweep": "headlab.experiments.sweep",
    "TASKS": "headlab.experiments.sweep_tasks",
    "generate": "headlab.experiments.sweep_tasks",
    "get_task": "headlab.experiments.sweep_tasks",
    "run_one": "headlab.experiments.train",
    "TornLineWarning": "headlab.results.jsonl_store",
    "read_rows": "headlab.results.jsonl_store",
    "RunConfig": "headlab.results.run_config",
    "SummaryRow": "headlab.results.sweep_summary",
    "summarize": "headlab.results.sweep_summary",
    "RunResult": "headlab.results.training_run",
}
__all__ = sorted(_WHERE)

if TYPE_CHECKING:  # pragma: no cover
    from headlab.experiments.run_sizing import make_config as make_config
    from headlab.experiments.sweep import SweepRequest as SweepRequest
    from headlab.experiments.sweep import expand_grid as expand_grid
    from headlab.experiments.sweep import plan_sweep as plan_sweep
    from headlab.experiments.sweep import run_sweep as run_sweep
    from headlab.experiments.sweep_tasks import TASKS as TASKS
    from headlab.experiments.sweep_tasks import generate as generate
    from headlab.experiments.sweep_tasks import get_task as get_task
    from headlab.experiments.train import run_one as run_one
    from headlab.results.jsonl_store import TornLineWarning as TornLineWarning
    from headlab.results.jsonl_store import read_rows as read_rows
    from headlab.results.run_config import RunConfig as RunConfig
    from headlab.results.sweep_summary import SummaryRow as SummaryRow
    from headlab.results.sweep_summary import summarize as summarize
    from headlab.results.training_run import RunResult as RunResult


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'headlab.experiments' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value

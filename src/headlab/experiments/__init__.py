"""Training sweeps across head counts at an equal parameter budget: tasks, runs, executors."""

from headlab.experiments.run_sizing import make_config
from headlab.experiments.sweep import SweepSpec, expand_grid, plan_sweep, run_sweep
from headlab.experiments.sweep_tasks import TASKS, generate, get_task
from headlab.experiments.train import run_one
from headlab.results.jsonl_store import TornLineWarning, read_rows
from headlab.results.run_config import RunConfig
from headlab.results.sweep_summary import SummaryRow, summarize
from headlab.results.training_run import RunResult

__all__ = [
    "TASKS",
    "RunConfig",
    "RunResult",
    "SummaryRow",
    "SweepSpec",
    "TornLineWarning",
    "expand_grid",
    "generate",
    "get_task",
    "make_config",
    "plan_sweep",
    "read_rows",
    "run_one",
    "run_sweep",
    "summarize",
]

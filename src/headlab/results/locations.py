"""Default places on disk: the one definition of each folder name headlab uses."""

from __future__ import annotations

from pathlib import Path

RESULTS_DIR = Path("headlab-results")  # results of `headlab model ...` and `headlab sweep`
REPORT_DIR = Path("headlab-report")  # `headlab report`
SWEEP_RESULTS = RESULTS_DIR / "sweep.jsonl"
SWEEP_FIGURE = RESULTS_DIR / "sweep.png"


def model_results(analysis: str) -> Path:
    """The default results file of ``headlab model <analysis>``."""
    return RESULTS_DIR / f"model_{analysis}.json"


def why_results(measurement: str) -> Path:
    """The default results file of ``headlab expressivity|specialisation|redundancy``."""
    return RESULTS_DIR / f"{measurement}.json"

"""Default places on disk: the one definition of each folder name headlab uses."""

from __future__ import annotations

import os
import sys
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


CACHE_ENV = "HEADLAB_CACHE"


def cache_root() -> Path:
    """headlab's cache folder: ``$HEADLAB_CACHE``, else the platform's convention."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "headlab" / "cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "headlab"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "headlab"

"""Writing results files atomically (temp file in the same folder, then os.replace)."""

from __future__ import annotations

import json
from pathlib import Path

from headlab.files import atomic_write_text

RESULTS_DIR = Path("headlab-results")


def write_json(path: str | Path, document: dict) -> Path:
    """Write ``document`` as JSON to ``path`` atomically; create the parent folders.

    Refuses (FileExistsError) to replace an existing file that is not a headlab results
    document (a JSON object with a "model" key), so that a user's file is never overwritten.
    """
    path = Path(path)
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, IsADirectoryError):
            old = None
        if not (isinstance(old, dict) and "model" in old):
            raise FileExistsError(f"{path} exists and is not a headlab results file; not replacing")
    return atomic_write_text(path, json.dumps(document, indent=1) + "\n")

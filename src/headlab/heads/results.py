"""Writing results files atomically (temp file in the same folder, then os.replace)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=1)
            file.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path

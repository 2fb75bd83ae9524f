"""Copies of model folders with an edited ``config.json``, for tests of malformed models.

Importable from any test module (pytest puts ``tests/`` on the path for its conftest.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def edited_copy(source: Path, copy: Path, **config_changes: object) -> Path:
    """``source`` copied to ``copy`` with ``config_changes`` merged into its config.json."""
    shutil.copytree(source, copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(config_changes)
    (copy / "config.json").write_text(json.dumps(config))
    return copy

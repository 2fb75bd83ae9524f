"""Writing files so that nothing is lost: a temp file in the same folder, then os.replace.

A reader sees the old file or the new one, never a half-written one; an interrupted write leaves
no temp file behind. New files get the usual permissions (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically, creating the parent folders. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def save_figure(figure: Any, path: str | Path, **savefig: Any) -> Path:
    """Render a matplotlib figure to PNG bytes, write them atomically, close the figure."""
    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", **savefig)
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)
    return atomic_write_bytes(path, buffer.getvalue())

"""Writing files so that nothing is lost: a temp file in the same folder, then os.replace.

A reader sees the old file or the new one, never a half-written one; an interrupted write leaves
no temp file behind. New files get the usual permissions (0666 less the umask), not mkstemp's 0600;
a file replaced keeps its own (a results file the user made private stays private).
``write_output`` applies headlab's output policy (``headlab.results.output_policy``) at the
moment of writing (figures through it: ``headlab.report.png_files.save_figure``);
``atomic_write_bytes`` is for paths inside a folder headlab owns.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from headlab.results.interrupts import temporary
from headlab.results.output_policy import Kind, check_output


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The permissions a file written at ``path`` gets: those of the regular file it replaces,
    else 0666 less the umask."""
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None and stat.S_ISREG(existing.st_mode):
        return existing.st_mode & 0o777
    return 0o666 & ~_umask()


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically, creating the parent folders; a file replaced keeps
    its permissions. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with temporary(tmp):  # an interrupt that cannot wait removes it (headlab.results.interrupts)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_output(
    path: str | Path, data: bytes, kind: Kind, *, force: bool = False, argument: str = "path"
) -> Path:
    """Write ``data`` atomically to ``path`` if the output policy allows ``kind`` there.

    Raises OutputRefused (a ValueError) otherwise, naming ``path`` as ``argument`` (the caller's
    name for it); the check is repeated here, at write time.
    """
    return atomic_write_bytes(check_output(path, kind, force=force, argument=argument), data)

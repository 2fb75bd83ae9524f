"""Where a report (or its figures folder) may be written, and the swap that puts it there.

A report folder is headlab's when it holds the marker file, which lists the files headlab wrote
into it. Writing is allowed to a new path, an empty folder, or a folder of the same kind. Never to
the current folder or one of its parents, to a folder that holds the report's inputs, to a file,
or to a folder that is not headlab's (``force=True`` does not change that). Files a user added
inside a headlab folder are named and kept, unless ``force``, which deletes them with a warning
naming them. The check runs before the build and again at the moment of the swap.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from headlab.notices import HeadlabWarning
from headlab.results.output_policy import OutputRefused, check_not_input, check_parent


@dataclass(frozen=True)
class FolderKind:
    marker: str  # file name of the marker inside a folder of this kind
    what: str  # "report" or "figures folder", for messages
    argument: str  # the library argument that names it (the CLI maps it to its flag)


class ReplacedUserFilesWarning(HeadlabWarning):
    """``force=True`` deleted files that a user had added inside a headlab folder (named)."""


def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(path))  # normalises "..", keeps a final symbolic link


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def written_files(folder: Path, kind: FolderKind) -> set[str]:
    """The names the marker lists (the files headlab wrote), always with the marker itself."""
    lines = (folder / kind.marker).read_text(encoding="utf-8", errors="replace").splitlines()
    return {kind.marker, *(line for line in lines[1:] if line and "/" not in line)}


def check_folder(
    path: str | Path,
    kind: FolderKind,
    *,
    inputs: tuple[Path, ...] = (),
    force: bool = False,
    warn: bool = True,
) -> Path:
    """The absolute path if a ``kind`` folder may replace ``path``; OutputRefused otherwise.
    With ``force`` and ``warn``, a ReplacedUserFilesWarning names the user's files it deletes
    (the early check passes ``warn=False``: the swap warns, when it deletes)."""
    target = _absolute(path)
    where = f"{kind.argument}={path}"
    cwd = Path.cwd().resolve()
    if inside(cwd, target) or inside(cwd, target.resolve()):
        raise OutputRefused(
            f"{where} is the current folder or one of its parents; not replacing it"
        )
    for item in inputs:
        if inside(_absolute(item), target) or inside(_absolute(item).resolve(), target.resolve()):
            raise OutputRefused(f"{where} holds an input of the report ({item}); not replacing it")
    check_parent(target, kind.argument)
    check_not_input(target, kind.argument)  # inside the model's folder, say
    if target.is_symlink():
        raise OutputRefused(f"{where} is a symbolic link; give the real path")
    if not target.exists():
        return target
    if not target.is_dir():
        raise OutputRefused(f"{where} exists and is not a folder; choose a new path")
    names = {p.name for p in target.iterdir()}
    if not names:
        return target
    if kind.marker not in names:
        raise OutputRefused(
            f"{where} is a folder that headlab did not write (no {kind.marker} inside); "
            "choose a new path (force=True replaces only a headlab "
            f"{kind.what})"
        )
    added = sorted(names - written_files(target, kind))
    if added and not force:
        shown = ", ".join(added[:5]) + (f" and {len(added) - 5} more" if len(added) > 5 else "")
        raise OutputRefused(
            f"{where} is a headlab {kind.what} holding files headlab did not write ({shown}); "
            "move them, or pass force=True to delete them"
        )
    if added and warn:
        warnings.warn(
            f"force=True: deleting files that headlab did not write in {target}: "
            + ", ".join(added),
            ReplacedUserFilesWarning,
            stacklevel=2,
        )
    return target


def new_folder(target: Path) -> Path:
    """A temporary folder beside ``target`` (made readable: mkdtemp makes 0700)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp.", dir=target.parent))
    os.chmod(tmp, 0o755)
    return tmp


def write_marker(folder: Path, kind: FolderKind, header: str) -> None:
    """The marker: a header line, then every file name in ``folder`` (what headlab wrote)."""
    names = sorted(p.name for p in folder.iterdir() if p.name != kind.marker)
    (folder / kind.marker).write_text("\n".join([header, *names]) + "\n", encoding="utf-8")


def swap_into_place(
    tmp: Path, target: Path, kind: FolderKind, *, inputs: tuple[Path, ...], force: bool
) -> None:
    """Check ``target`` again, then rename ``tmp`` to it; an old folder is moved aside, deleted.

    On any failure ``tmp`` is removed and an old folder is put back.
    """
    try:
        check_folder(target, kind, inputs=inputs, force=force)
        if not target.exists():
            os.replace(tmp, target)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        aside = old / "previous"
        os.replace(target, aside)
        try:
            os.replace(tmp, target)
        except OSError:
            os.replace(aside, target)  # put the old folder back
            raise
        finally:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

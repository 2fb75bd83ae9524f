"""Where a report (or its figures folder) may be written, and the swap that puts it there.

A report folder is headlab's when it holds the marker file, which lists the files headlab wrote
into it. Writing is allowed to a new path, an empty folder, or a folder of the same kind; with
``force``, also over headlab's own output of another kind (a figures folder where a report goes,
or a file headlab wrote: ``headlab.results.output_policy.is_headlab_output``). Never to the
current folder or one of its parents, to a folder that holds the report's inputs, to a file or a
folder that headlab did not write, and never over files a user added inside a headlab folder:
those are named, and the user moves them (``force`` does not change that: headlab deletes only
what it wrote). The check runs before the build and again at the moment of the swap.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from headlab.results.output_policy import (
    OutputRefused,
    check_not_input,
    check_parent,
    headlab_output_kind,
)

REPORT_MARKER = ".headlab-report"
FIGURES_MARKER = ".headlab-figures"
#: Every folder marker headlab writes, and what a folder holding it is.
MARKERS = {REPORT_MARKER: "report", FIGURES_MARKER: "figures folder"}


@dataclass(frozen=True)
class FolderKind:
    marker: str  # file name of the marker inside a folder of this kind
    what: str  # "report" or "figures folder", for messages
    argument: str  # the library argument that names it (the CLI maps it to its flag)


def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(path))  # normalises "..", keeps a final symbolic link


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def written_files(folder: Path, marker: str) -> set[str]:
    """The names the ``marker`` file lists (the files headlab wrote), always with the marker."""
    lines = (folder / marker).read_text(encoding="utf-8", errors="replace").splitlines()
    return {marker, *(line for line in lines[1:] if line and "/" not in line)}


def _check_existing_file(target: Path, where: str, force: bool) -> Path:
    """A file where the folder goes: ``force`` replaces it only when headlab wrote it."""
    other = headlab_output_kind(target) if target.is_file() else None
    if other is None:
        raise OutputRefused(
            f"{where} exists, is not a folder and headlab did not write it; not replacing it, "
            "not even with force=True (choose a new path)"
        )
    if not force:
        raise OutputRefused(
            f"{where} holds {other}; not replacing it (choose a new path, or pass force=True "
            "to replace it)"
        )
    return target


def check_folder(
    path: str | Path,
    kind: FolderKind,
    *,
    inputs: tuple[Path, ...] = (),
    force: bool = False,
) -> Path:
    """The absolute path if a ``kind`` folder may replace ``path``; OutputRefused otherwise.

    force: also replace headlab's own output of another kind (a folder with another headlab
    marker, or a file headlab wrote); never a folder without a marker, nor one holding files
    that its marker does not list (the refusal names them).
    """
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
        return _check_existing_file(target, where, force)
    names = {p.name for p in target.iterdir()}
    if not names:
        return target
    marker = kind.marker if kind.marker in names else next((m for m in MARKERS if m in names), None)
    if marker is None:
        raise OutputRefused(
            f"{where} is a folder that headlab did not write (no {kind.marker} inside); "
            "not replacing it, not even with force=True (choose a new path)"
        )
    if marker != kind.marker and not force:
        raise OutputRefused(
            f"{where} is a headlab {MARKERS[marker]}, not a {kind.what}; not replacing it "
            "(choose a new path, or pass force=True to replace it)"
        )
    added = sorted(names - written_files(target, marker))
    if added:
        shown = ", ".join(added[:5]) + (f" and {len(added) - 5} more" if len(added) > 5 else "")
        raise OutputRefused(
            f"{where} is a headlab {MARKERS[marker]} holding files headlab did not write "
            f"({shown}); headlab never deletes them, not even with force=True (move them out "
            "of the folder, or choose a new path)"
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

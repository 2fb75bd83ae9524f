"""Where headlab may write: one policy for every file and folder it writes.

headlab writes only to a path that does not exist (or an empty file), or over a regular file (or
folder) that headlab wrote itself and that holds the same kind of output. With ``force`` (the
CLI's ``--force``) it may also replace headlab's own output of another kind (``is_headlab_output``);
never a file that headlab did not write, not even with ``force``. It never writes to a device, a
FIFO, a socket, through a symbolic link, or over a directory. Every refusal is an
``OutputRefused`` (a ValueError, so the CLI prints one line and exits 2) that names the path, the
reason and what to do.

The check runs twice: before any long work starts (``check_output``), and again at the moment of
writing (the writers in ``headlab.results.atomic_files`` call it), so a file that appeared in
between is safe.

How a file is recognised as headlab's own, by kind:
- ``Kind.json(name)``: a JSON object whose ``"headlab"`` key equals ``name``;
- ``Kind.png(name)``: a PNG whose ``headlab`` text chunk equals ``name``;
- a results JSONL (``headlab.results.jsonl_store``): its first line is a sweep row, or an object
  whose ``"headlab"`` key is a string; appended to by its own writer (``jsonl_writer``);
- folders: a marker file inside (``headlab.report.target``).
Any of these, of any kind, is headlab's output (``is_headlab_output``), which ``force`` may replace.
An empty regular file holds nothing to lose and counts as new.

A command's own inputs are never replaced, not even with ``force``: a command declares them
(``reading``; the CLI's input options do it as they are parsed, and its model options declare
every file and folder the model's load reads: ``declare_inputs``), and every check refuses an
output that is one of them (the same file, by device and inode, or the same path), or that lies
inside an input folder whose files the command reads (its outputs would be read back as input on
the next run; a model's folder is one).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from headlab.results.input_files import file_type, read_json

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class OutputRefused(ValueError):
    """headlab will not write to this path (the message says why and what to do)."""


@dataclass(frozen=True)
class Kind:
    """A kind of output: its name and how to tell an existing file of that kind."""

    name: str
    description: str
    is_ours: Callable[[Path, str], bool]

    @staticmethod
    def json(name: str) -> Kind:
        return Kind(name, f"headlab {name} results (JSON)", _is_our_json)

    @staticmethod
    def png(name: str) -> Kind:
        return Kind(name, f"headlab {name} figure (PNG)", _is_our_png)

    def recognises(self, path: Path) -> bool:
        try:
            return self.is_ours(path, self.name)
        except (OSError, ValueError):
            return False


def _is_our_json(path: Path, name: str) -> bool:
    document = read_json(path, "", expected=object)  # bounded: size, depth (ValueError)
    return isinstance(document, dict) and document.get("headlab") == name


def _json_kind(path: Path) -> str | None:
    """The ``"headlab"`` string of a JSON object file (headlab's results of that kind); None."""
    document = read_json(path, "", expected=object)
    tag = document.get("headlab") if isinstance(document, dict) else None
    return tag if isinstance(tag, str) else None


def _png_kind(path: Path) -> str | None:
    with path.open("rb") as handle:
        return png_text_chunks(handle.read(2**16)).get("headlab")


def _jsonl_kind(path: Path) -> str | None:
    """``sweep`` when the first line of ``path`` is a whole sweep row, the ``"headlab"`` string
    of a first line that is an object holding one (a corpus-roles run); None otherwise."""
    import json

    from headlab.results.jsonl_store import PEEK_BYTES, row_problem

    with path.open("rb") as handle:
        head = handle.read(PEEK_BYTES).lstrip()
    line, newline, _ = head.partition(b"\n")
    if not newline:
        return None
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(row, dict):
        return None
    tag = row.get("headlab")
    if isinstance(tag, str):
        return tag
    return "sweep" if row_problem(row) is None else None


def headlab_output_kind(path: str | Path) -> str | None:
    """What headlab output the regular file ``path`` holds: a JSON results document, a figure
    (PNG), or a results JSONL, as ``"<kind> results (JSON)"`` and the like; None when headlab did
    not write it (or it cannot be read)."""
    path = Path(path)
    for read, form in (
        (_png_kind, "figure (PNG)"),
        (_json_kind, "results (JSON)"),
        (_jsonl_kind, "results (JSONL)"),
    ):
        try:
            tag = read(path)
        except (OSError, ValueError, UnicodeError):
            tag = None
        if tag is not None:  # a tag is the file's text: shown on one line, bounded
            shown = tag if tag.isprintable() and len(tag) <= 60 else ascii(tag[:60])
            return f"headlab {shown} {form}"
    return None


def is_headlab_output(path: str | Path) -> bool:
    """Whether headlab wrote the regular file ``path`` (of any kind): what ``force`` may replace."""
    return headlab_output_kind(path) is not None


def png_text_chunks(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG (keyword -> text); {} when ``data`` is not a PNG."""
    if not data.startswith(PNG_SIGNATURE):
        return {}
    chunks, at = {}, len(PNG_SIGNATURE)
    while at + 8 <= len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        chunk_type, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if chunk_type == b"tEXt" and b"\0" in body:
            keyword, _, text = body.partition(b"\0")
            chunks[keyword.decode("latin-1")] = text.decode("latin-1")
        if chunk_type in (b"IDAT", b"IEND"):
            break  # matplotlib writes its text chunks before the image data
        at += 12 + length
    return chunks


def _is_our_png(path: Path, name: str) -> bool:
    with path.open("rb") as handle:
        head = handle.read(2**16)
    return png_text_chunks(head).get("headlab") == name


def _named(argument: str, path: Path) -> str:
    """``out=results.json``: the path by the caller's argument name (the CLI maps it to a flag)."""
    return f"{argument}={path}"


def check_parent(path: Path, argument: str = "path") -> None:
    """The nearest existing ancestor of ``path`` must be a writable directory.

    argument: the name of ``path`` in the caller's signature, which the messages use (the CLI
    turns it into its flag, ``cli.parsing.flags``).
    """
    parent = path.absolute().parent
    while not parent.exists() and not parent.is_symlink():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputRefused(f"{_named(argument, path)}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputRefused(f"{_named(argument, path)}: the folder {parent} is not writable")


# The inputs of the command under way: (path, whether it is a folder whose files it reads), or a
# function that names such pairs when an output is checked (``declare_inputs``).
Inputs = Callable[[], Iterable[tuple[Path, bool]]]
_INPUTS: ContextVar[tuple[tuple[Path, bool] | Inputs, ...]] = ContextVar(
    "headlab_inputs", default=()
)


@contextmanager
def reading(*paths: str | Path | None, folder: bool = False) -> Iterator[None]:
    """Within this block, ``paths`` (None ones left out) are the command's inputs: no output may
    replace one (or lie inside one, for ``folder`` inputs whose files are read)."""
    added = tuple((Path(p), folder) for p in paths if p is not None)
    token = _INPUTS.set(_INPUTS.get() + added)
    try:
        yield
    finally:
        _INPUTS.reset(token)


@contextmanager
def new_command() -> Iterator[None]:
    """A command starts with no inputs declared (``declare_input`` adds them for its length)."""
    token = _INPUTS.set(())
    try:
        yield
    finally:
        _INPUTS.reset(token)


def declare_input(path: str | Path | None, *, folder: bool = False) -> None:
    """Add ``path`` to the inputs of the command under way (until ``new_command`` ends)."""
    if path is not None:
        _INPUTS.set((*_INPUTS.get(), (Path(path), folder)))


def declare_inputs(inputs: Inputs) -> None:
    """Add the (path, is_folder) pairs that ``inputs()`` names to the inputs of the command
    under way; it is called when an output is checked, so that finding them (a model's files,
    ``headlab.models.load.opened_paths``) costs nothing before then."""
    _INPUTS.set((*_INPUTS.get(), inputs))


def _declared() -> Iterator[tuple[Path, bool]]:
    for entry in _INPUTS.get():
        if callable(entry):
            yield from entry()
        else:
            yield entry


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_not_input(path: str | Path, argument: str = "path") -> None:
    """OutputRefused when ``path`` is one of the command's inputs or inside an input folder it
    reads, whatever ``force`` says."""
    path = Path(path)
    for source, folder in _declared():
        if _same(path, source):
            raise OutputRefused(
                f"{_named(argument, path)} is this command's input ({source}); headlab never "
                "writes over its own input, not even with force (choose another path)"
            )
        if folder and path.resolve().is_relative_to(source.resolve()):
            raise OutputRefused(
                f"{_named(argument, path)} is inside the input folder {source}, whose files "
                "this command reads: the next run would read it as input (choose a path "
                "outside it)"
            )


def check_output(
    path: str | Path, kind: Kind, *, force: bool = False, argument: str = "path"
) -> Path:
    """Return ``path`` if headlab may write ``kind`` there; otherwise raise OutputRefused.

    force: also replace headlab's own output of another kind (``is_headlab_output``); never a
    file that headlab did not write, a device, FIFO, directory or a symbolic link's target.
    argument: the name of ``path`` in the caller's signature, which the messages use
    (``out=results.json exists ...``).
    """
    path = Path(path)
    where = _named(argument, path)
    check_parent(path, argument)
    check_not_input(path, argument)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(info.st_mode):
        raise OutputRefused(
            f"{where} is a symbolic link; headlab does not write through links (give the real path)"
        )
    if not stat.S_ISREG(info.st_mode):
        raise OutputRefused(f"{where} is {file_type(info.st_mode)}; expected a file path")
    if info.st_size == 0 or kind.recognises(path):
        return path
    other = headlab_output_kind(path)
    if other is not None and force:
        return path
    if other is not None:
        raise OutputRefused(
            f"{where} holds {other}, not {kind.description}; not replacing it "
            "(choose a new path, or pass force=True to replace it)"
        )
    raise OutputRefused(
        f"{where} exists and headlab did not write it; not replacing it, not even with "
        "force=True (choose a new path, or move the file away)"
    )

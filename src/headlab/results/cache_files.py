"""What headlab keeps in its cache is an input like any other: read back bounded and typed.

A cache entry is a JSON object in a file headlab wrote, but anything may have changed it since
(an editor, a copy, a full disk, another version of headlab). ``read_entry`` reads it with the
reader of every user file (``results.input_files``: a regular file, bounded in size, nesting
measured before it is parsed) and the ``expect_*`` checks read its fields by type and range, each
raising ``BadEntry`` (a ValueError) that says what is wrong. A caller discards an entry that
fails (``discarded``: one ``CacheNotice``) and builds it again; ``write_entry`` writes one
atomically (a temporary file beside it, renamed into place). The GGUF cache's manifest and the
probe cache's entries are read this way; any other cache should be too.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from pathlib import Path

from headlab.notices import CacheNotice
from headlab.results.input_files import read_json

MAX_ENTRY_BYTES = 4 * 2**20  # a manifest or a probe entry is a few kB
MAX_ENTRY_DEPTH = 8  # they nest 4 deep


class BadEntry(ValueError):
    """A cache entry that cannot be read, or whose fields are not what headlab writes."""


def read_entry(path: Path, max_bytes: int = MAX_ENTRY_BYTES) -> dict:
    """The JSON object in ``path``; FileNotFoundError when there is none (also where a file
    stands in the place of a folder above it: a cache root that is a file holds no entry),
    BadEntry when it is not a regular file, over ``max_bytes``, nested deeper than
    ``MAX_ENTRY_DEPTH``, not UTF-8 JSON or not an object."""
    if not path.parent.is_dir():  # missing, or a file where the cache's folder would be
        raise FileNotFoundError(f"{path.parent} is no folder: the cache holds no entry there")
    try:
        return read_json(path, "", max_bytes=max_bytes, max_depth=MAX_ENTRY_DEPTH)
    except FileNotFoundError:
        raise
    except (ValueError, OSError) as error:
        raise BadEntry(str(error)) from None


def expect(document: dict, key: str, kind: type | tuple[type, ...]):
    """``document[key]`` when it is a ``kind`` (bool is never an int); BadEntry otherwise."""
    if not isinstance(document, dict) or key not in document:
        raise BadEntry(f"no {key!r}")
    value = document[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise BadEntry(f"{key!r}: expected {names}, got {type(value).__name__}")
    return value


def expect_int(value: object, what: str, low: int, high: int) -> int:
    """``value`` when it is an int in [low, high]; BadEntry otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) < 40 else f"a {type(value).__name__}"
        raise BadEntry(f"{what}: expected an integer in [{low}, {high}], got {shown}")
    return value


def write_entry(path: Path, document: dict) -> None:
    """``document`` written to ``path`` atomically; OSError propagates (nothing is left)."""
    handle, temporary = tempfile.mkstemp(prefix=f".tmp-{path.name[:24]}-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(json.dumps(document, separators=(",", ":")))
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def discarded(what: str, path: Path, why: str) -> None:
    """The one notice for an entry that failed its check and is built again."""
    warnings.warn(
        f"{what} {path} did not pass its check ({why}); discarded and built again",
        CacheNotice,
        stacklevel=3,
    )

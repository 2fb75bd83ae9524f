"""The GGUF cache's manifest read back as an input: bounded, then checked field by field.

``read_manifest(folder)`` reads ``headlab-manifest.json`` with the reader of every cache entry
(``cache_files.read_entry``: a regular file, bounded in size and nesting) and checks each field
the cache relies on (gguf_cache.py writes them): the format, the stamp, the GGUF's SHA-256 and
stat, and for every file a plain file name (never a path), its size, SHA-256 and stat. Anything
else raises ``BadEntry`` saying what; the cache then converts again.
"""

from __future__ import annotations

import re
from pathlib import Path

from headlab.results.cache_files import BadEntry, expect, expect_int, read_entry

MANIFEST = "headlab-manifest.json"
FORMAT = 2  # bump it when what a converted folder holds changes: older folders are rebuilt
_NS = 2**64  # a bound on every size, time (ns) and inode a manifest records
#: a file name the conversion writes: no separator, no leading dot, never "." or ".."
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,254}")


def _facts(facts: object, what: str) -> None:
    """BadEntry unless ``facts`` is a dict of a SHA-256 and (where recorded) a size and a
    stat of four integers."""
    expect(facts, "sha256", str)
    if isinstance(facts, dict) and "size" in facts:
        expect_int(facts["size"], f"{what}'s size", 0, _NS)
    if isinstance(facts, dict) and "stat" in facts:
        recorded = expect(facts, "stat", list)
        if len(recorded) != 4:
            raise BadEntry(f"{what}'s stat: expected 4 integers, got {len(recorded)} values")
        for value in recorded:
            expect_int(value, f"{what}'s stat", 0, _NS)


def read_manifest(folder: Path) -> dict:
    """``folder``'s manifest, read bounded and checked field by field; FileNotFoundError, or
    BadEntry saying what is wrong."""
    manifest = read_entry(folder / MANIFEST)
    if expect(manifest, "format", int) != FORMAT:
        raise BadEntry(f"format {manifest['format']}, expected {FORMAT}")
    expect_int(manifest.get("stat_ns"), "stat_ns", 0, _NS)
    _facts(expect(manifest, "source", dict), "the GGUF")
    files = expect(manifest, "files", dict)
    if not files:
        raise BadEntry("it lists no files")
    for name, facts in files.items():
        if not FILE_NAME.fullmatch(name):
            raise BadEntry(f"{name[:40]!r} is not a file name")
        _facts(facts, name)
        expect(facts, "size", int)
    return manifest

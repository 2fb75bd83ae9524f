"""The source tree's two shape rules (docs/layout.md): no source file over 400 lines, and no two
modules share a file name. A command's module is named ``cli/commands/<command>_command.py``
(``compare_command.py`` parses ``headlab compare``), so it never shares the name of the library
module that command calls; everywhere a name says what the module holds, once."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

import headlab

SRC = Path(headlab.__file__).parent
MAX_LINES = 400
# Files still over the limit, each with the work that splits it.
KNOWN_LONG: set[str] = set()  # cli/model.py went with one module per command (issue 29)


def _relative(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def test_no_source_file_over_400_lines() -> None:
    long = {
        _relative(p): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert {name: n for name, n in long.items() if name not in KNOWN_LONG} == {}


def test_the_known_long_files_are_still_long() -> None:
    """An exception is dropped once its file is split, so the list cannot hide a new long file."""
    for name in KNOWN_LONG:
        path = SRC / name
        assert path.exists() and len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES


# Repeats that a landing in progress removes, each with the work that removes it.
KNOWN_REPEATS: set[str] = set()  # models/llama.py went with the hand-built route (issue 29)


def repeated_names(paths: list[str]) -> dict[str, list[str]]:
    """File names that more than one module has (package inits aside)."""
    where = defaultdict(list)
    for path in paths:
        name = path.rpartition("/")[2]
        if name != "__init__.py":
            where[name].append(path)
    return {name: found for name, found in where.items() if len(found) > 1}


def test_no_two_modules_share_a_name() -> None:
    paths = [_relative(p) for p in SRC.rglob("*.py")]
    assert len(paths) > 100  # the tree is found
    assert {name for name in repeated_names(paths) if name not in KNOWN_REPEATS} == set()


def test_the_known_repeats_still_repeat() -> None:
    """An exception is dropped once its repeat is gone, so the list cannot hide a new one."""
    paths = [_relative(p) for p in SRC.rglob("*.py")]
    assert set(repeated_names(paths)) >= KNOWN_REPEATS


def test_the_name_check_sees_a_repeat() -> None:
    paths = [
        "heads/compare.py",
        "analysis/compare.py",
        "cli/commands/roles_command.py",
        "heads/roles.py",
        "heads/__init__.py",
        "models/__init__.py",
    ]
    assert repeated_names(paths) == {"compare.py": ["heads/compare.py", "analysis/compare.py"]}


#: Dataclasses whose suffix is one a request might take, and why each is not an analysis'
#: request (those are named ``<analysis>Request``: docs/cli.md, "Typed requests").
NOT_REQUESTS = {
    "AttendOptions": "how the kernel runs one call (its path), not what an analysis is asked",
    "MaskSpec": "a mask, decided in one place",
    "KeySpec": "the keys a score split explains, parsed from --keys",
    "TaskSpec": "a toy task's shapes",
    "PoolingConfig": "a sentence model's own pooling, read from its files",
    "RunConfig": "a trained run's identity (its run_id)",
}
OTHER_SUFFIXES = ("Setup", "Config", "Spec", "Options", "Settings")


def test_typed_requests_are_named_request() -> None:
    """One pattern: a dataclass named like a request but not ``...Request`` is listed above."""
    import ast

    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name.endswith(OTHER_SUFFIXES):
                found.add(node.name)
    assert sorted(found - set(NOT_REQUESTS)) == []
    assert sorted(set(NOT_REQUESTS) - found) == []  # a name gone leaves the list too


def test_no_tracked_file_holds_a_merge_conflict_marker() -> None:
    root = Path(__file__).resolve().parents[1]
    markers = ("<" * 7 + " ", ">" * 7 + " ")  # written so that this file holds none
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files"], capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    held = []
    for name in listed.stdout.splitlines():
        path = root / name
        if path.suffix not in {".py", ".md", ".js", ".css", ".html", ".toml", ".txt", ".ipynb"}:
            continue
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith(markers) or line == "=" * 7:
                held.append(f"{name}:{number}")
    assert not held, held

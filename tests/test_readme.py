"""The README's outputs stay true: its deterministic ``headlab`` commands are run and compared.

A ``console`` block that starts with ``$ headlab ...`` shows that command's output at 80 columns
(``headlab model`` blocks excepted: they need the packaged weights and minutes).
A block preceded by ``<!-- abridged -->`` shows only the first lines of it (checked as a prefix).
Numbers are compared to 1e-4 relative (a full-precision float in ``--json`` may differ in its last
digits on another CPU or torch build); every other character must be the same.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from headlab.cli.main import main

README = Path(__file__).resolve().parents[1] / "README.md"
# ``headlab model`` blocks are left out: they need the packaged weights and take minutes.
BLOCK = re.compile(
    r"(<!-- abridged -->\n)?```console\n\$ (headlab (?!model)[^\n]*)\n(.*?)```", re.S
)


def blocks() -> list[tuple[str, str, bool]]:
    """(command, shown output, abridged) for each console block of the README."""
    text = README.read_text(encoding="utf-8")
    return [(m[2], m[3], bool(m[1])) for m in BLOCK.finditer(text)]


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


def assert_same(printed: list[str], expected: list[str]) -> None:
    """Line by line: the same text around the numbers, and numbers within 1e-4 relative."""
    assert len(printed) == len(expected), "\n".join(printed)
    for got, want in zip(printed, expected, strict=True):
        assert NUMBER.sub("#", got) == NUMBER.sub("#", want), (got, want)
        got_numbers = [float(x) for x in NUMBER.findall(got)]
        want_numbers = [float(x) for x in NUMBER.findall(want)]
        assert got_numbers == pytest.approx(want_numbers, rel=1e-4, abs=1e-6), (got, want)


def test_the_readme_has_console_blocks():
    assert len(blocks()) >= 5


@pytest.mark.parametrize(("command", "shown", "abridged"), blocks(), ids=lambda v: str(v)[:40])
def test_readme_output_is_what_the_command_prints(command, shown, abridged, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    main(shlex.split(command)[1:])
    printed = _lines(capsys.readouterr().out)
    expected = _lines(shown)
    assert_same(printed[: len(expected)] if abridged else printed, expected)


def test_every_table_the_readme_shows_fits_80_columns():
    """The README says its outputs were taken at 80 columns: every table drawn in a code block
    (rich's box characters) must then fit them, the blocks this file does not run included."""
    text = README.read_text(encoding="utf-8")
    fences = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    wide = [
        line
        for block in fences
        for line in block.splitlines()
        if re.search("[┃│┏┗└┌]", line) and len(line.rstrip()) > 80
    ]
    assert not wide, f"{len(wide)} table lines wider than 80 columns, the first: {wide[0]}"

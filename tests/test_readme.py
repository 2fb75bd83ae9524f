"""The README's and the docs' outputs stay true, and the docs speak to users.

Every ``console`` block (`` ```console `` then ``$ headlab ...``) shows what that command prints
at 80 columns, and is run and compared here, unless the line before it marks it:

    <!-- abridged -->              only the first lines are shown (checked as a prefix)
    <!-- this machine -->          numbers about the machine (its memory) differ elsewhere: the
                                   words are compared, not the numbers
    <!-- files: a.jsonl b.txt -->  the command reads these files: made (one line each) first
    <!-- not run: REASON -->       not run in the tests, and why (a model and minutes, a test
                                   model folder): measured where the text says

Commands run in an empty folder. Numbers are compared to 1e-4 relative (a full-precision float
in ``--json`` may differ in its last digits on another CPU or torch build); every other character
must be the same. No doc names a path outside the repository (a machine's folders), the people
or sessions that wrote it, or files the repository does not have.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from headlab.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- ([^>]*) -->\n)?```console\n\$ (headlab [^\n]*)\n(.*?)```", re.S)
MARKS = ("abridged", "this machine", "files:", "not run:")


def _all_blocks() -> list[tuple[str, str, str, str]]:
    """(file, mark or "", command, shown output) for each console block of the docs."""
    found = []
    for path in DOCS:
        for m in BLOCK.finditer(path.read_text(encoding="utf-8")):
            found.append((path.name, m[1] or "", m[2], m[3]))
    return found


def blocks() -> list[tuple[str, str, str, str]]:
    """The blocks this file runs: every block not marked ``not run``."""
    return [b for b in _all_blocks() if not b[1].startswith("not run:")]


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


def test_the_docs_have_console_blocks_each_run_or_marked_with_why_not():
    every = _all_blocks()
    assert len(blocks()) >= 7
    for name, mark, command, _ in every:
        assert not mark or mark.startswith(MARKS), (name, mark)
        if mark.startswith("not run:"):
            assert len(mark) > len("not run: ") + 5, (name, command)  # a reason is given
        else:  # what is run must be fast enough for the tests: no model, no circuits
            assert not re.match(r"headlab (model|circuits|report --model)", command), (
                f"{name}: {command!r} needs a model and minutes: mark it <!-- not run: why -->"
            )


@pytest.mark.parametrize(("name", "mark", "command", "shown"), blocks(), ids=lambda v: str(v)[:40])
def test_docs_output_is_what_the_command_prints(
    name, mark, command, shown, capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)
    if mark.startswith("files:"):
        for file in mark.removeprefix("files:").split():
            (tmp_path / file).write_text("a line that is not a results row\n", encoding="utf-8")
    try:
        main(shlex.split(command)[1:])
    except SystemExit as stop:  # a refusal: exit 2, its one line on stderr
        assert stop.code == 2, stop.code
    captured = capsys.readouterr()
    printed = _lines(captured.out + captured.err)
    expected = _lines(shown)
    if mark == "this machine":
        assert [NUMBER.sub("#", x) for x in printed] == [NUMBER.sub("#", x) for x in expected]
        return
    assert_same(printed[: len(expected)] if mark == "abridged" else printed, expected)


# what only a machine or a team has: their folders, people, sessions and private files
NOT_FOR_USERS = re.compile(
    r"/work/|/home/|/root/|/Users/|/mnt/|heavy\.lock|the lead\b|helper sessions?|helpers'|"
    r"helpers put|\bhelper [a-z]+\d|\bagents?\b|"
    r"\bissues? \d|\bHELPERS\.md|\bREFERENCES\.md|circsci",
    re.I,
)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_no_doc_names_a_machine_a_person_or_a_file_the_repository_lacks(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [
        f"{path.name}:{i}: {line.strip()[:90]}"
        for i, line in enumerate(lines, 1)
        if NOT_FOR_USERS.search(line)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_table_the_docs_show_fits_80_columns(path):
    """The docs say their outputs were taken at 80 columns: every table drawn in a code block
    (rich's box characters) must then fit them, the blocks this file does not run included."""
    text = path.read_text(encoding="utf-8")
    fences = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    wide = [
        line
        for block in fences
        for line in block.splitlines()
        if re.search("[┃│┏┗└┌]", line) and len(line.rstrip()) > 80
    ]
    assert not wide, f"{len(wide)} table lines wider than 80 columns, the first: {wide[0]}"

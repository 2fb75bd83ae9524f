"""Test modules are imported by their file name (no packages under tests/): two files of one
name in different folders stop the collection of the whole suite ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_no_two_test_modules_share_a_name():
    files = Path(__file__).parent.rglob("*.py")
    names = Counter(p.name for p in files if p.name != "conftest.py")  # conftests are per folder
    assert [name for name, n in names.items() if n > 1] == []

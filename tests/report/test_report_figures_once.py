"""Each figure has one implementation, in the report. (That the report measures nothing and loads
no torch is read from the import graph: ``tests/test_layering.py``.)"""

from __future__ import annotations

import re
from pathlib import Path

import headlab
import headlab.report

REPORT = Path(headlab.report.__file__).parent
PACKAGE = Path(headlab.__file__).parent


def test_each_figure_is_defined_once() -> None:
    names: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        if "matplotlib" not in source:
            continue
        for name in re.findall(r"^def (\w+)\(", source, re.M):
            names.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
        assert "imshow" not in source or path.parent == REPORT, f"{path} draws a figure"
    assert {n: p for n, p in names.items() if len(p) > 1} == {}

"""Every link between the README and the docs points at a file the repository has and, with a
``#fragment``, at a heading that file has (GitHub's anchors: lower case, punctuation dropped,
spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def anchors(path: Path) -> set[str]:
    """GitHub's anchor of each heading of ``path`` (outside code blocks)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_anchor_rule_on_a_hand_written_case():
    assert "circuits-the-command-composition-and-formation-time-and-memory" in anchors(
        ROOT / "docs" / "benchmarks.md"
    )


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_relative_link_reaches_a_file_and_heading(path):
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{path.name}: " + "; ".join(broken)

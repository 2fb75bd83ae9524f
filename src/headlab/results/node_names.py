"""The names of heads and K/V groups, one vocabulary for every command and results file.

``L.H`` is query head H of layer L. ``L.gG`` is K/V group G of layer L: the query heads that read
K/V head G (in a GQA layer, every ``num_heads / num_kv_heads`` consecutive heads). Both
``L.gG`` and ``L.kvG`` are read (``model ablate --ablate 18.kv2`` and ``18.g2`` are the same
group); ``L.gG`` is written.
"""

from __future__ import annotations

import re

_GROUP = re.compile(r"(\d+)\.(?:g|kv)(\d+)")


def head_name(layer: int, head: int) -> str:
    return f"{layer}.{head}"


def group_name(layer: int, group: int) -> str:
    return f"{layer}.g{group}"


def parse_group(name: str) -> tuple[int, int] | None:
    """(layer, group) of ``"18.g2"`` or ``"18.kv2"``; None for anything else."""
    match = _GROUP.fullmatch(name.strip())
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def canonical_group(name: str) -> str:
    """``name`` with a K/V group written as ``L.gG`` (``"18.kv2"`` -> ``"18.g2"``); any other
    name unchanged."""
    parsed = parse_group(name)
    return name if parsed is None else group_name(*parsed)

"""A long text's attention maps as a results file holds them: each head's blocked map and the
attention each key receives, binned (``headlab.heads.attention_maps`` measures them).
"""

from __future__ import annotations

from dataclasses import dataclass

from headlab.results.schema import Fields, is_number, problem


@dataclass(frozen=True)
class AttentionMaps:
    """``blocked`` and ``received`` as in the module docstring, nested lists (layer, head, ..)."""

    block: int
    blocked: list[list[list[list[float]]]]
    bin: int
    received: list[list[list[float]]]

    def __repr__(self) -> str:
        heads = sum(len(row) for row in self.blocked)
        return (
            f"AttentionMaps({heads} heads: blocked maps of {self.block}-token blocks, "
            f"received profiles of {self.bin}-token bins)"
        )

    def to_dict(self) -> dict:
        return {
            "block": self.block,
            "blocked": self.blocked,
            "bin": self.bin,
            "received": self.received,
        }

    @classmethod
    def from_dict(cls, f: Fields, layers: int, heads: int) -> AttentionMaps:
        """ValueError naming the field unless both are layers x heads of finite numbers."""
        blocked = _nested(f, "blocked", layers, heads, depth=2)
        received = _nested(f, "received", layers, heads, depth=1)
        return cls(f.int("block", 1), blocked, f.int("bin", 1), received)

    def check_length(self, n_tokens: int, where: str) -> None:
        """ValueError naming the field unless the maps hold what a text of ``n_tokens`` tokens
        gives: ceil(n_tokens / block) blocks a side, ceil(n_tokens / bin) bins. A size in a
        results file is checked against what the file holds (a hand-edited ``n_tokens`` of
        10**12 would make the report allocate for it)."""
        blocks, bins = -(-n_tokens // self.block), -(-n_tokens // self.bin)
        for i, row in enumerate(self.blocked):
            for j, cell in enumerate(row):
                if len(cell) != blocks or any(len(line) != blocks for line in cell):
                    expected = f"{blocks} x {blocks} blocks (context.n_tokens {n_tokens})"
                    raise problem(f"{where}.blocked[{i}][{j}]", expected, len(cell))
        for i, row in enumerate(self.received):
            for j, cell in enumerate(row):
                if len(cell) != bins:
                    expected = f"{bins} bins (context.n_tokens {n_tokens})"
                    raise problem(f"{where}.received[{i}][{j}]", expected, len(cell))


def _nested(f: Fields, key: str, layers: int, heads: int, *, depth: int) -> list:
    value = f.data.get(key)
    where = f.at(key)
    if not (isinstance(value, list) and len(value) == layers):
        raise problem(where, f"{layers} lists (layer)", value)
    for i, row in enumerate(value):
        if not (isinstance(row, list) and len(row) <= heads):
            raise problem(f"{where}[{i}]", f"at most {heads} lists (head)", row)
        for j, cell in enumerate(row):
            _numbers(cell, f"{where}[{i}][{j}]", depth)
    return value


def _numbers(value: object, where: str, depth: int) -> None:
    if not isinstance(value, list):
        raise problem(where, "a list", value)
    for k, item in enumerate(value):
        if depth > 1:
            _numbers(item, f"{where}[{k}]", depth - 1)
        elif not is_number(item):
            raise problem(f"{where}[{k}]", "a finite number", item)

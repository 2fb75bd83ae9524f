"""The ``model-importance`` results file: each head's importance (``headlab.heads.importance``
measures it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headlab.results.schema import Fields


@dataclass(frozen=True)
class ImportanceResult:
    """importance: (layer, head) normalised per layer (l2); raw: E|dL/d xi| before that."""

    KIND: ClassVar[str] = "model-importance"

    model: str
    n_texts: int
    objective: str
    importance: list[list[float]]
    raw: list[list[float]]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_texts": self.n_texts,
            "objective": self.objective,
            "importance": self.importance,
            "raw": self.raw,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-importance") -> ImportanceResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        importance = f.grid("importance")
        raw = f.grid("raw", len(importance), max(map(len, importance), default=0))
        return cls(f.name("model"), f.int("n_texts"), f.str("objective"), importance, raw)

    def ranking(self) -> list[tuple[int, int]]:
        """All (layer, head) pairs, least important first (ties: lower layer, lower head)."""
        pairs = [(l, h) for l, row in enumerate(self.importance) for h in range(len(row))]
        return sorted(pairs, key=lambda p: (self.importance[p[0]][p[1]], p))

"""The ``model-collapse`` results file: the same weights viewed with fewer heads
(``headlab.heads.collapse``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headlab.results.quality_measures import MEASURES
from headlab.results.schema import Fields


@dataclass(frozen=True)
class CollapseRow:
    """One variant: ``layer`` None means every layer was viewed as ``num_heads`` heads."""

    num_heads: int
    measures: dict[str, float]
    layer: int | None = None

    def to_dict(self) -> dict:
        where = {} if self.layer is None else {"layer": self.layer}
        return {**where, "num_heads": self.num_heads, **self.measures}

    @classmethod
    def from_dict(cls, f: Fields) -> CollapseRow:
        layer = f.size("layer", 0) if "layer" in f.data else None
        return cls(f.size("num_heads"), f.measures(("layer", "num_heads"), MEASURES), layer)


ROW_LISTS = ("all_layers", "per_layer")


@dataclass(frozen=True)
class CollapseResult:
    KIND: ClassVar[str] = "model-collapse"

    model: str
    n_texts: int
    all_layers: list[CollapseRow]
    per_layer: list[CollapseRow]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_texts": self.n_texts,
            "all_layers": [r.to_dict() for r in self.all_layers],
            "per_layer": [r.to_dict() for r in self.per_layer],
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-collapse") -> CollapseResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        every, single = (
            [CollapseRow.from_dict(r) for r in f.objects(k, nonempty=True)] for k in ROW_LISTS
        )
        return cls(f.name("model"), f.int("n_texts"), every, single)

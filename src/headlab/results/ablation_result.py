"""The ``model-ablate`` results file: the objective with and without some heads
(``headlab.heads.ablation`` measures it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headlab.results.schema import Fields
from headlab.results.summary_repr import summarised

Head = tuple[int, int]  # (layer, head)


Group = tuple[int, int]  # (layer, K/V group)


@summarised
@dataclass(frozen=True)
class AblationResult:
    """The objective over ``n_texts`` texts with and without ablating ``heads`` (layer, head)."""

    KIND: ClassVar[str] = "model-ablate"

    model: str
    n_texts: int
    objective: str
    mode: str
    heads: list[Head]
    baseline: float
    ablated: float

    @property
    def change(self) -> float:
        """ablated - baseline: how much worse (> 0) the model is without the heads."""
        return self.ablated - self.baseline

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_texts": self.n_texts,
            "objective": self.objective,
            "mode": self.mode,
            "heads": [list(h) for h in self.heads],
            "baseline": self.baseline,
            "ablated": self.ablated,
            "change": self.change,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-ablate") -> AblationResult:
        """The inverse of ``to_dict`` (``change`` is derived); ValueError naming a bad field."""
        f = Fields(data, where)
        heads = f.heads("heads")
        return cls(
            f.name("model"),
            f.int("n_texts"),
            f.str("objective"),
            f.str("mode"),
            heads,
            f.number("baseline"),
            f.number("ablated"),
        )

"""The ``model-prune`` results file: heads removed in order of importance
(``headlab.heads.pruning``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headlab.results.quality_measures import MEASURES
from headlab.results.schema import Fields

BY = ("removal", "mask")  # how heads are taken out: removed from the weights, or masked


@dataclass(frozen=True)
class PruneStep:
    order: str
    fraction_pruned: float
    heads_pruned: int
    params: int
    latency_ms: float
    measures: dict[str, float]

    def to_dict(self) -> dict:
        return {
            "order": self.order,
            "fraction_pruned": self.fraction_pruned,
            "heads_pruned": self.heads_pruned,
            "params": self.params,
            "latency_ms": self.latency_ms,
            **self.measures,
        }

    @classmethod
    def from_dict(cls, f: Fields) -> PruneStep:
        known = ("order", "fraction_pruned", "heads_pruned", "params", "latency_ms")
        return cls(
            order=f.str("order"),
            fraction_pruned=f.number("fraction_pruned", 0.0, 1.0),
            heads_pruned=f.int("heads_pruned"),
            params=f.int("params"),
            latency_ms=f.number("latency_ms", 0.0),
            measures=f.measures(known, MEASURES),
        )


@dataclass(frozen=True)
class PruneResult:
    """The pruning curve; ``by``: how heads were pruned ("removal", or "mask": a results file
    says so only then, and a file without it is by removal)."""

    KIND: ClassVar[str] = "model-prune"

    model: str
    n_texts: int
    steps: list[PruneStep]
    by: str = "removal"

    def to_dict(self) -> dict:
        out = {
            "model": self.model,
            "n_texts": self.n_texts,
            "steps": [s.to_dict() for s in self.steps],
        }
        if self.by != "removal":
            out["by"] = self.by
        return out

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-prune") -> PruneResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        steps = [PruneStep.from_dict(s) for s in f.objects("steps", nonempty=True)]
        by = f.get("by", "removal or mask", lambda v: v in BY) if "by" in data else "removal"
        return cls(f.name("model"), f.int("n_texts"), steps, by)

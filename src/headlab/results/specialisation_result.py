"""The ``specialisation`` results file: when heads split the lookups between them
(``headlab.experiments.specialisation`` trains the runs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

from headlab.results.schema import Fields, is_int
from headlab.results.summary_repr import summarised


@dataclass(frozen=True)
class Checkpoint:
    """One evaluation of a run: each lookup's ``accuracy`` (D,), the same without each head
    ``ablated`` (head, lookup), and the head serving each lookup (``served_by``, D heads or
    None)."""

    step: int
    accuracy: list[float]
    ablated: list[list[float]]
    served_by: list[int | None]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields, heads: int) -> Checkpoint:
        """``heads``: the run's head count, the rows of ``ablated`` and the bound of a head."""
        accuracy = f.numbers("accuracy")
        lookups = len(accuracy)

        def ok(served: object) -> bool:
            return (
                isinstance(served, list)
                and len(served) == lookups
                and all(h is None or (is_int(h) and 0 <= h < heads) for h in served)
            )

        expected = f"{lookups} heads (each < {heads}) or null, one per lookup"
        served = f.get("served_by", expected, ok)
        return cls(f.int("step"), accuracy, f.grid("ablated", heads, lookups), served)


@dataclass(frozen=True)
class SpecialisationRun:
    """One run (schema in docs/answers.md): ``num_heads`` heads of ``head_dim`` with
    ``attention``, its ``params``, final ``accuracy`` (mean over lookups), ``split_step`` (None:
    never split), ``settled_step`` (from when the serving heads stay as they end; None in files
    written before it was measured) and its ``checkpoints``."""

    num_heads: int
    head_dim: int
    attention: str
    params: int
    accuracy: float
    split_step: int | None
    settled_step: int | None
    checkpoints: list[Checkpoint]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> SpecialisationRun:
        heads = f.int("num_heads", 1)
        split, settled = (
            None if f.data.get(key) is None else f.int(key)
            for key in ("split_step", "settled_step")
        )
        checkpoints = [Checkpoint.from_dict(point, heads) for point in f.objects("checkpoints")]
        return cls(
            heads,
            f.int("head_dim", 1),
            f.str("attention"),
            f.int("params"),
            f.number("accuracy", 0.0, 1.0),
            split,
            settled,
            checkpoints,
        )


@summarised
@dataclass(frozen=True)
class SpecialisationResult:
    """``runs``: a ``SpecialisationRun`` per (attention, head count) of the config."""

    KIND: ClassVar[str] = "specialisation"

    config: dict
    runs: list[SpecialisationRun] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"config": self.config, "runs": [run.to_dict() for run in self.runs]}

    @classmethod
    def from_dict(cls, data: dict, where: str = "specialisation") -> SpecialisationResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        config = f.object("config").data
        return cls(config=config, runs=[SpecialisationRun.from_dict(r) for r in f.objects("runs")])

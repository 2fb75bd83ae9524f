"""What exact path patching of a set of edges will cost, said before it starts
(``headlab.circuits.run.patching_estimate`` measures it; ``headlab circuits`` prints it or
refuses)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from headlab.results.schema import Fields


@dataclass(frozen=True)
class PatchingEstimate:
    """What exact path patching of ``edges`` edges costs: ``forwards`` runs of the pairs through
    the whole model (each edge runs one copy of the pairs from its receiver's layer to the
    logits) at ``forward_seconds`` each, timed on this machine just before."""

    edges: int
    forwards: float
    forward_seconds: float

    @property
    def seconds(self) -> float:
        return self.forwards * self.forward_seconds

    def says(self) -> str:
        return (
            f"path-patching {self.edges:,} edges: about {self.forwards:,.0f} forwards of the "
            f"pairs, {duration(self.seconds)} here ({self.forward_seconds:.2f} s a forward)"
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "patching-estimate") -> PatchingEstimate:
        f = Fields(data, where)
        return cls(f.int("edges"), f.number("forwards", 0.0), f.number("forward_seconds", 0.0))


def duration(seconds: float) -> str:
    """Seconds in words: "40 s", "12 min", "9.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

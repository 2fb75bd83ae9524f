"""What exact path patching of a set of edges, or the patching sweep, will cost, said before it
starts (``headlab.circuits.run.patching_estimate`` and ``headlab.circuits.sweep_cost`` measure
them; ``headlab circuits`` prints them or refuses)."""

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


@dataclass(frozen=True)
class SweepCost:
    """What the patching sweep costs (``headlab.circuits.sweep_cost``): ``units`` nodes
    patched at ``places`` places each (1: the whole node; 1 + pos with by_position): ``runs``
    patched runs passing through ``layer_runs`` layers in all (what ``head_patching``'s progress
    counts), worth ``forwards`` whole forwards of the pairs, ``flops`` in all, at ``rate``
    FLOP/s (``product_rate``)."""

    units: int
    places: int
    runs: int
    layer_runs: int
    forwards: float
    flops: float
    rate: float

    @property
    def seconds(self) -> float:
        return self.flops / self.rate

    def says(self) -> str:
        where = f" x {self.places} places" if self.places > 1 else ""
        return (
            f"head-patching {self.units} nodes{where}: {self.runs:,} patched runs, about "
            f"{self.forwards:,.0f} forwards of the pairs, at least {duration(self.seconds)} here "
            f"({self.rate / 1e9:.0f} GFLOP/s in a product of the model's shapes)"
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "sweep-cost") -> SweepCost:
        f = Fields(data, where)
        return cls(
            f.int("units"),
            f.int("places"),
            f.int("runs"),
            f.int("layer_runs"),
            f.number("forwards", 0.0),
            f.number("flops", 0.0),
            f.number("rate", 1e-9),
        )


def duration(seconds: float) -> str:
    """Seconds in words: "40 s", "12 min", "9.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

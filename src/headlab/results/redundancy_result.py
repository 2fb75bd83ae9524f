"""The ``redundancy`` results file: how much of a layer's heads a shared low-rank subspace
explains (``headlab.heads.redundancy`` measures it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

from headlab.results.quality_measures import MEASURES
from headlab.results.schema import Fields
from headlab.results.summary_repr import summarised


@dataclass(frozen=True)
class LayerSpectrum:
    """One layer's singular values of [B_1 | ... | B_H] (the top ``embed_dim``, normalised to
    sum to one), their effective rank, and ``max_rank`` = min(head * d_head, embed_dim)."""

    layer: int
    singular_values: list[float]
    effective_rank: float
    max_rank: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> LayerSpectrum:
        return cls(
            f.int("layer"),
            f.numbers("singular_values"),
            f.number("effective_rank"),
            f.int("max_rank"),
        )


@dataclass(frozen=True)
class CurvePoint:
    """The model with every layer's key/query cut to ``rank`` (``fraction`` of embed_dim), judged
    by ``headlab.heads.quality``: ``measures`` are one of its ``MEASURES`` pairs, no other name
    (as in collapse and prune rows); ``original`` marks the uncut model's row."""

    rank: int
    fraction: float
    original: bool
    measures: dict[str, float]

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "fraction": self.fraction,
            "original": self.original,
            **self.measures,
        }

    @classmethod
    def from_dict(cls, f: Fields) -> CurvePoint:
        measures = f.measures(("rank", "fraction", "original"), MEASURES)
        return cls(f.int("rank", 1), f.number("fraction", 0.0), f.bool("original"), measures)


@summarised
@dataclass(frozen=True)
class RedundancyResult:
    """``layers``: a ``LayerSpectrum`` per layer; ``curve``: a ``CurvePoint`` for the original
    model, then one per rank with every layer cut to that rank."""

    KIND: ClassVar[str] = "redundancy"

    model: str
    n_texts: int
    embed_dim: int
    qk_width: int  # H * d_head: the key/query width of one layer
    layers: list[LayerSpectrum] = field(default_factory=list)
    curve: list[CurvePoint] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_texts": self.n_texts,
            "embed_dim": self.embed_dim,
            "qk_width": self.qk_width,
            "layers": [layer.to_dict() for layer in self.layers],
            "curve": [point.to_dict() for point in self.curve],
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "redundancy") -> RedundancyResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        layers = [LayerSpectrum.from_dict(layer) for layer in f.objects("layers")]
        curve = [CurvePoint.from_dict(point) for point in f.objects("curve")]
        return cls(
            f.name("model"),
            f.int("n_texts"),
            f.int("embed_dim", 1),
            f.int("qk_width", 1),
            layers,
            curve,
        )

"""The ``expressivity`` results file: rank bounds and fitted patterns of one head against many
(``headlab.analysis.expressivity`` measures them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

from headlab.results.schema import Fields
from headlab.results.summary_repr import summarised


@dataclass(frozen=True)
class RankRow:
    """How close one head of ``head_dim`` gets to ``targets`` seq_len x seq_len patterns from
    ``source`` ("random", or the name of the model whose heads gave them): the mean row KL it
    reaches, as mean ``kl`` and ``kl_std`` over the targets."""

    source: str
    seq_len: int
    head_dim: int
    kl: float
    kl_std: float
    targets: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> RankRow:
        return cls(
            f.str("source"),
            f.int("seq_len", 1),
            f.int("head_dim", 1),
            f.number("kl"),
            f.number("kl_std", 0.0),
            f.int("targets", 1),
        )


@dataclass(frozen=True)
class PatternRow:
    """``num_heads`` heads of ``head_dim`` copying ``blocks`` offsets at once over ``seq_len``
    positions: the relative error (MSE / target power) left on held-out sequences."""

    num_heads: int
    head_dim: int
    blocks: int
    seq_len: int
    relative_error: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> PatternRow:
        return cls(
            f.int("num_heads", 1),
            f.int("head_dim", 1),
            f.int("blocks", 1),
            f.int("seq_len", 1),
            f.number("relative_error", 0.0),
        )


@summarised
@dataclass(frozen=True)
class ExpressivityResult:
    """``rank``: a ``RankRow`` per (source, seq_len, head_dim); ``patterns``: a ``PatternRow``
    for 1 head and for h heads (schema in docs/answers.md)."""

    KIND: ClassVar[str] = "expressivity"

    config: dict
    rank: list[RankRow] = field(default_factory=list)
    patterns: list[PatternRow] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "rank": [r.to_dict() for r in self.rank],
            "patterns": [p.to_dict() for p in self.patterns],
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "expressivity") -> ExpressivityResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        config = f.object("config").data
        rank = [RankRow.from_dict(row) for row in f.objects("rank")]
        patterns = [PatternRow.from_dict(row) for row in f.objects("patterns")]
        return cls(config=config, rank=rank, patterns=patterns)

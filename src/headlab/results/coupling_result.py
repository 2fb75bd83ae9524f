"""The results of ``headlab.analysis.coupling`` and ``analysis.grad``: per-head gradient norms,
coupling matrices, one side of a coupling comparison (``headlab grad`` prints them; ``--json``
writes ``to_dict``). Plain NumPy, no torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class HeadGradientNorms:
    """Frobenius norms of each head's block of the weight gradients, shape (head,) each."""

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray

    def to_dict(self) -> dict[str, list[float]]:
        return {k: getattr(self, k).tolist() for k in ("w_q", "w_k", "w_v", "w_o")}


@dataclass(frozen=True)
class CouplingMatrix:
    """One coupling matrix (blocks, blocks) with its title and largest off-diagonal entry."""

    title: str
    matrix: np.ndarray
    off_diagonal_max: float

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "matrix": self.matrix.tolist(),
            "off_diagonal_max": self.off_diagonal_max,
        }


@dataclass(frozen=True)
class CouplingSummary:
    """``gradient_coupling`` of a seeded module with ``num_heads`` heads and of its 1-head view
    (same weights, cut into the same ``num_heads`` blocks)."""

    d_model: int
    num_heads: int
    seq_len: int
    matrices: list[CouplingMatrix]

    def to_dict(self) -> dict:
        return {
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "seq_len": self.seq_len,
            "matrices": [m.to_dict() for m in self.matrices],
        }


@dataclass(frozen=True)
class CouplingSide:
    """One head count: the (block, block) coupling matrix and the per-head gradient norms."""

    num_heads: int
    kind: str  # "" for plain heads, " (talking heads)" for the talking-heads side
    coupling: list[list[float]]
    off_diagonal_max: float
    diagonal_mean: float
    head_gradient_norms: dict[str, list[float]]


@dataclass(frozen=True)
class CouplingComparison:
    """Both sides of a set-up, measured over ``blocks`` = max(heads, vs_heads) blocks."""

    setup: dict  # the ``CompareSetup`` measured, as its ``to_dict`` gives it
    blocks: int
    sides: list[CouplingSide]
    talking_heads: float = 0.0

    def to_dict(self) -> dict:
        """The JSON document: {setup, blocks, talking_heads, sides: [{num_heads, kind, coupling,
        off_diagonal_max, diagonal_mean, head_gradient_norms}]}."""
        return {
            "setup": dict(self.setup),
            "blocks": self.blocks,
            "talking_heads": self.talking_heads,
            "sides": [asdict(side) for side in self.sides],
        }

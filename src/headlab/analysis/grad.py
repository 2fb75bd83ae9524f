"""Gradient coupling of a seed set-up on both sides: the measurement behind ``headlab grad``."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from headlab.analysis.coupling import gradient_coupling, head_gradient_norms
from headlab.analysis.scenarios import CompareSetup, build


@dataclass(frozen=True)
class CouplingSide:
    """One head count: the (block, block) coupling matrix and the per-head gradient norms."""

    num_heads: int
    coupling: list[list[float]]
    off_diagonal_max: float
    diagonal_mean: float
    head_gradient_norms: dict[str, list[float]]


@dataclass(frozen=True)
class CouplingComparison:
    """Both sides of a set-up, measured over ``blocks`` = max(heads, vs_heads) blocks."""

    setup: CompareSetup
    blocks: int
    sides: list[CouplingSide]

    def to_dict(self) -> dict:
        """The JSON document: {setup, blocks, sides: [{num_heads, coupling, off_diagonal_max,
        diagonal_mean, head_gradient_norms}]}."""
        return {
            "setup": self.setup.to_dict(),
            "blocks": self.blocks,
            "sides": [asdict(side) for side in self.sides],
        }


def coupling_comparison(setup: CompareSetup) -> CouplingComparison:
    """Build ``setup`` (with its output projection: W_O's gradient is part of the answer) and
    measure the gradient coupling of the module with ``heads`` and of its ``vs_heads`` view."""
    a, b, x = build(setup)
    blocks = max(setup.heads, setup.vs_heads)
    sides = []
    for module in (a, b):
        matrix = gradient_coupling(module, x, blocks=blocks)
        off = matrix[~np.eye(blocks, dtype=bool)]
        sides.append(
            CouplingSide(
                num_heads=module.num_heads,
                coupling=matrix.tolist(),
                off_diagonal_max=float(off.max()) if off.size else 0.0,
                diagonal_mean=float(np.diag(matrix).mean()),
                head_gradient_norms=head_gradient_norms(module, x).to_dict(),
            )
        )
    return CouplingComparison(setup, blocks, sides)

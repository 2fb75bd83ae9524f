"""Gradient coupling of a seed set-up on both sides: the measurement behind ``headlab grad``."""

from __future__ import annotations

import numpy as np

from headlab.analysis.coupling import gradient_coupling, head_gradient_norms
from headlab.analysis.scenarios import CompareRequest, build
from headlab.results.coupling_result import CouplingComparison, CouplingSide


def _grouped(setup: CompareRequest) -> bool:
    """Whether the set-up's first side shares K/V heads (TalkingHeadsAttention does not)."""
    return setup.kv_heads not in (None, setup.heads)


def coupling_comparison(setup: CompareRequest, talking_heads: float = 0.0) -> CouplingComparison:
    """Build ``setup`` (with its output projection: W_O's gradient is part of the answer) and
    measure the gradient coupling of the module with ``heads`` and of its ``vs_heads`` view.

    talking_heads: when not 0, the first side becomes talking heads (Shazeer et al. 2020) with
    mixing identity + talking_heads * N(0, 1) (seeded by the set-up's seed).
    ValueError when the gradients overflow float32 (a huge talking_heads), instead of results
    made of infinities and NaN.
    """
    if talking_heads and _grouped(setup):
        raise ValueError(
            f"talking_heads needs as many K/V heads as heads, got kv_heads={setup.kv_heads} "
            f"with heads={setup.heads}"
        )
    a, b, x = build(setup)
    if talking_heads:
        from headlab.attention.talking_heads import TalkingHeadsAttention
        from headlab.limits import check_finite

        scale = check_finite("talking_heads", talking_heads)
        a = TalkingHeadsAttention.from_plain(a, mix_scale=scale, seed=setup.seed)
    blocks = max(setup.heads, setup.vs_heads)
    sides = []
    for module in (a, b):
        matrix = gradient_coupling(module, x, blocks=blocks)
        norms = head_gradient_norms(module, x).to_dict()
        if not (np.isfinite(matrix).all() and all(np.isfinite(v).all() for v in norms.values())):
            cause = f"lower talking_heads={talking_heads:g}" if talking_heads else "lower the sizes"
            raise ValueError(
                f"the gradients of {module.num_heads} head(s) overflowed float32 (infinite or NaN "
                f"values): nothing to measure; {cause}"
            )
        off = matrix[~np.eye(blocks, dtype=bool)]
        sides.append(
            CouplingSide(
                num_heads=module.num_heads,
                kind=" (talking heads)" if module is a and talking_heads else "",
                coupling=matrix.tolist(),
                off_diagonal_max=float(off.max()) if off.size else 0.0,
                diagonal_mean=float(np.diag(matrix).mean()),
                head_gradient_norms=norms,
            )
        )
    return CouplingComparison(setup.to_dict(), blocks, sides, talking_heads)

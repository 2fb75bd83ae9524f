"""A plain-language answer written from a Comparison's measured numbers."""

from __future__ import annotations

from headlab.analysis.compare import Comparison


def _side(heads: int, head_dim: int) -> str:
    return f"{heads} head{'s' if heads != 1 else ''} of {head_dim}"


def explain(c: Comparison) -> str:
    """What differs, why, with the figures: one paragraph per point, no canned verdicts."""
    a, b = _side(c.heads_a, c.head_dim_a), _side(c.heads_b, c.head_dim_b)
    rows = c.rows_equal.numel()
    equal_rows = int(c.rows_equal.sum())
    lines = []
    if c.identical:
        lines.append(
            f"{a} and {b} on the same weights give identical outputs: all {rows} query rows "
            "agree bit for bit."
        )
    else:
        word = "nearly the same" if c.verdict == "close" else "different"
        lines.append(
            f"{a} and {b} on the same weights give {word} outputs: largest difference "
            f"{c.max_abs_diff:.3g}, relative (Frobenius) difference {c.rel_diff:.3g}; "
            f"{equal_rows} of {rows} query rows agree bit for bit."
        )
    if c.findings:
        lines.append("Why, row by row:")
        for f in c.findings:
            lines.append(f"- {f.code} ({f.fraction:.0%} of rows): {f.detail}.")
    if c.gradients_equal:
        lines.append(
            "The gradients of the shared weights coincide too, for the same upstream gradient."
        )
    else:
        worst = max(c.gradient_diffs, key=c.gradient_diffs.get, default=None)
        where = f" (largest in {worst}: {c.gradient_diffs[worst]:.3g})" if worst else ""
        also = "Even so, the" if c.identical or c.verdict == "close" else "The"
        lines.append(
            f"{also} gradients of the shared weights differ{where}: training would move the two "
            "apart. With several heads the W_Q/W_K/W_V gradient of each head block depends only "
            "on that head (`headlab grad` shows the coupling)."
        )
    if c.params["a"] == c.params["b"]:
        lines.append(
            f"Both sides have {c.params['a']:,} parameters: the head count splits the same "
            "projections, it does not add weights."
        )
    else:
        lines.append(f"Parameters: {c.params['a']:,} against {c.params['b']:,}.")
    return "\n".join(lines)

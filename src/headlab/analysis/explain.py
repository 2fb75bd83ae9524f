"""A plain-language answer written from a comparison's result (``Comparison.result()``): its
measured numbers and its findings'. Reads only the plain result, no tensors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headlab.results.comparison_result import ComparisonResult


def _g(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.3g}"


def describe(code: str, m: Mapping[str, Any]) -> str:
    """The sentence for one finding, written from its measures (``Finding.measures``)."""
    in_rows = f"in {m.get('rows')} of {m.get('of_rows')} rows"
    if code == "same_config":
        return (
            f"both sides have {m['heads']} heads of {m['head_dim']}: the same function of the "
            "same weights"
        )
    if code == "single_key":
        return (
            f"{m['rows']} of {m['of_rows']} rows see exactly one key (a causal first position or "
            "padding), so every head puts weight 1 on it"
        )
    if code == "saturated_same_key":
        return (
            f"{in_rows} every head of both sides puts all but {m['saturation']:g} of its weight "
            f"on the same key: scores reach {_g(m['max_abs_score'])} and the top two keys are at "
            f"least {_g(m['min_top_two_gap'])} apart, so softmax is one-hot"
        )
    if code == "uniform":
        grads = (
            ""
            if m["gradients_equal"]
            else "; the outputs agree there but the gradients do not (dW_K differs: each head's "
            "softmax Jacobian sees only its own slice)"
        )
        return (
            f"{in_rows} every head of both sides attends uniformly over its visible keys (all "
            "scores in a row equal: identical keys or W_K = 0), and an average does not depend "
            f"on the split{grads}"
        )
    if code == "identical_values":
        return (
            f"{in_rows} the visible value rows are equal (largest spread "
            f"{_g(m['max_spread'])}), so any weights give the same output"
        )
    if code == "partition":
        per_head = ", ".join(f"{x:.2f}" for x in m["total_variation_per_head"])
        other = m["one_hot_on_other_keys"]
        saturated_note = (
            f"; {other} of these rows are one-hot in every head but not on the same key "
            "(saturated, and the heads' slices pick different keys)"
            if other
            else ""
        )
        return (
            f"{in_rows} the {m['heads_many']} softmaxes over {m['head_dim_many']}-component "
            f"slices differ from the {m['heads_few']} over {m['head_dim_few']} components: total "
            f"variation of each head's weights from the other side's closest head: {per_head} "
            f"(mean {m['total_variation_mean']:.2f}){saturated_note}"
        )
    raise ValueError(f"code must be a finding code, got {code!r}")


def _side(heads: int, head_dim: int) -> str:
    return f"{heads} head{'s' if heads != 1 else ''} of {head_dim}"


def explain(c: ComparisonResult, *, findings: bool = True) -> str:
    """What differs, why, with the figures: one paragraph per point, no canned verdicts.

    ``c`` is ``Comparison.result()``: a result read back from a ``--json`` document has no
    ``sides`` (head counts and sizes, row counts, gradient differences) and is refused with a
    ValueError. Each finding's sentence is written from its ``measures``; ``findings=False``
    leaves them out for a caller that shows the findings itself (``headlab compare`` prints them
    as a table).
    """
    sides = c.sides
    if sides is None:
        raise ValueError(
            "explain needs the sides of the comparison (head counts, row counts, gradient "
            "differences), got a result without them (a --json document): use Comparison.result()"
        )
    a, b = _side(sides.heads_a, sides.head_dim_a), _side(sides.heads_b, sides.head_dim_b)
    rows, equal_rows = sides.rows, sides.equal_rows
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
    if c.findings and findings:
        lines.append("Why, row by row:")
        for f in c.findings:
            lines.append(f"- {f.code} ({f.fraction:.0%} of rows): {describe(f.code, f.measures)}.")
    if c.gradients_equal:
        lines.append(
            "The gradients of the shared weights coincide too, for the same upstream gradient."
        )
    else:
        diffs = sides.gradient_diffs
        worst = max(diffs, key=diffs.get, default=None)
        where = f" (largest in {worst}: {diffs[worst]:.3g})" if worst else ""
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

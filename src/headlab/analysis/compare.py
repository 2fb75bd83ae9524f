"""Compare two head configurations on the same input: outputs, weights, gradients, and why.

Typical use is a module against the same weights viewed with another head count::

    m = MultiHeadAttention(512, 8, batch_first=True)
    c = compare(m, m.with_num_heads(1), x)
    c.verdict, c.findings, explain(c.result())

``compare`` returns the measurement, tensors included (both sides' outputs and weights, the rows
each finding covers); ``Comparison.result()`` is what it says as plain data
(``headlab.results.comparison_result.ComparisonResult``: the ``--json`` document and what the
explanation reads), which the CLI prints and ``explain`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from headlab.analysis.findings import Finding, SideFacts, diagnose, side_facts
from headlab.analysis.params import parameter_count
from headlab.analysis.row_gradients import row_gradients
from headlab.attention.module import MultiHeadAttention
from headlab.results.comparison_result import ComparedSides, ComparisonResult

CLOSE_EPS_FACTOR = 1e3  # "close": allclose with rtol = atol = 1e3 * machine epsilon of the dtype


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` measured, tensors included (``result()`` is the plain result). Tensors
    are batch first: output (batch, q_pos, embed_dim),
    weights (batch, head, q_pos, k_pos), rows_equal (batch, q_pos).

    verdict: "identical" (bit for bit), "close" (within 1e3 machine epsilons) or "different".
    gradients_equal: the gradients of every shared parameter coincide (within the same tolerance)
    for one fixed upstream gradient; gradient_diffs holds the largest difference per parameter.
    """

    heads_a: int
    heads_b: int
    head_dim_a: int
    head_dim_b: int
    output_a: Tensor
    output_b: Tensor
    weights_a: Tensor
    weights_b: Tensor
    rows_equal: Tensor
    identical: bool
    max_abs_diff: float
    rel_diff: float
    verdict: str
    gradients_equal: bool
    gradient_diffs: dict[str, float]
    params: dict[str, int]
    findings: list[Finding] = field(default_factory=list)

    def result(self) -> ComparisonResult:
        """What the comparison says, as plain data: the ``--json`` document and the sides' sizes,
        row counts and gradient differences that ``explain`` reads."""
        sides = ComparedSides(
            heads_a=self.heads_a,
            head_dim_a=self.head_dim_a,
            heads_b=self.heads_b,
            head_dim_b=self.head_dim_b,
            rows=self.rows_equal.numel(),
            equal_rows=int(self.rows_equal.sum()),
            gradient_diffs=dict(self.gradient_diffs),
        )
        return ComparisonResult(
            verdict=self.verdict,
            identical=self.identical,
            max_abs_diff=self.max_abs_diff,
            rel_diff=self.rel_diff,
            gradients_equal=self.gradients_equal,
            findings=[f.row() for f in self.findings],
            params=dict(self.params),
            sides=sides,
        )


def _tolerance(dtype: torch.dtype) -> float:
    return CLOSE_EPS_FACTOR * torch.finfo(dtype).eps


def _side(
    module: MultiHeadAttention,
    inputs: tuple[Tensor, Tensor | None, Tensor | None],
    masks: dict,
    upstream: Tensor | None,
    upstream_seed: int,
) -> tuple[SideFacts, Tensor, dict[str, Tensor], Tensor]:
    """(what the findings read of the module's trace, taken without autograd; its output
    (batch, q_pos, embed_dim); its parameters' gradients for ``upstream`` (batch, q_pos,
    embed_dim), drawn from N(0, 1) with ``upstream_seed`` when None; the upstream).

    The trace's scores are read (``side_facts``) and dropped before the gradients and the other
    side run: of a side only its weights stay, so the peak is one side's scores and weights
    beside the other's weights (docs/answers.md, memory). The gradients flow through the trace's
    own explicit path: the fused kernel recomputes the softmax, and at saturated scores (the
    first seed question: scores near 4e5) its gradients differ from the exact ones by rounding
    far above the comparison's tolerance. They are taken a block of query rows at a time
    (``row_gradients``), so the side's autograd graph never holds every weight at once, and two
    sides never hold theirs at once.
    """
    with torch.no_grad():
        trace = module.trace(*inputs, **masks)
    facts, out = side_facts(trace), trace.output
    del trace  # its scores, contributions and head outputs
    if upstream is None:
        gen = torch.Generator(device=out.device).manual_seed(upstream_seed)
        upstream = torch.randn(out.shape, generator=gen, dtype=out.dtype, device=out.device)
    return facts, out, row_gradients(module, inputs, masks, upstream), upstream


def compare(
    a: MultiHeadAttention,
    b: MultiHeadAttention,
    query: Tensor,
    key: Tensor | None = None,
    value: Tensor | None = None,
    *,
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    is_causal: bool = False,
    upstream_seed: int = 0,
) -> Comparison:
    """Run ``a`` and ``b`` on the same input and measure where and why their outputs differ.

    query/key/value are in the modules' own layout (``batch_first`` etc.); key and value default
    to query. The gradient check uses one upstream gradient drawn from N(0, 1) with
    ``upstream_seed`` and compares the gradients of parameters with the same name and shape.
    Raises ValueError when the two modules do not take the same input widths.
    """
    if (a.embed_dim, a.kdim, a.vdim) != (b.embed_dim, b.kdim, b.vdim):
        raise ValueError(
            f"modules must take the same widths, got (embed_dim, kdim, vdim)="
            f"{(a.embed_dim, a.kdim, a.vdim)} and {(b.embed_dim, b.kdim, b.vdim)}"
        )
    masks = {"attn_mask": attn_mask, "key_padding_mask": key_padding_mask, "is_causal": is_causal}
    # One side at a time: its trace, then its gradients (docs/answers.md: memory).
    side_a, out_a, grads_a, upstream = _side(a, (query, key, value), masks, None, upstream_seed)
    side_b, out_b, grads_b, _ = _side(b, (query, key, value), masks, upstream, upstream_seed)
    tol = _tolerance(out_a.dtype)
    diff = (out_a - out_b).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    rel = float(diff.norm() / out_a.norm().clamp(min=torch.finfo(out_a.dtype).tiny))
    identical = torch.equal(out_a, out_b)
    close = torch.allclose(out_a, out_b, rtol=tol, atol=tol)
    verdict = "identical" if identical else "close" if close else "different"
    gradient_diffs = {
        name: float((grads_a[name] - g).abs().max())
        for name, g in grads_b.items()
        if name in grads_a and grads_a[name].shape == g.shape
    }
    gradients_equal = bool(gradient_diffs) and all(
        torch.allclose(grads_a[n], grads_b[n], rtol=tol, atol=tol) for n in gradient_diffs
    )
    same_config = (a.num_heads, a.head_dim, a.num_kv_heads) == (
        b.num_heads,
        b.head_dim,
        b.num_kv_heads,
    ) and all(torch.equal(pa, pb) for pa, pb in zip(a.parameters(), b.parameters(), strict=False))
    return Comparison(
        heads_a=a.num_heads,
        heads_b=b.num_heads,
        head_dim_a=a.head_dim,
        head_dim_b=b.head_dim,
        output_a=out_a,
        output_b=out_b,
        weights_a=side_a.weights,
        weights_b=side_b.weights,
        rows_equal=(out_a == out_b).all(dim=-1),
        identical=identical,
        max_abs_diff=max_abs,
        rel_diff=rel,
        verdict=verdict,
        gradients_equal=gradients_equal,
        gradient_diffs=gradient_diffs,
        params={"a": parameter_count(a), "b": parameter_count(b)},
        findings=diagnose(side_a, side_b, same_config=same_config, gradients_equal=gradients_equal),
    )

"""The chunked path's backward (``RecomputedAttention``): each chunk's weights recomputed from Q
and K, never kept. Its gradients must equal autograd through the explicit path (whole tensors)
for every mask kind, soft-cap, sink logits, head views, grouped K/V heads and query offsets
(drawn by ``test_kernel.cases``), with chunks of one row so that every block boundary is
crossed; finite differences check it once more in float64."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernel import F64, _attend, cases

import headlab.attention.kernel as kernel
from headlab.attention.chunked import RecomputedAttention
from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.mask_spec import MaskSpec


def _inputs(q, k, v, sinks):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    if sinks is not None:
        leaves.append(sinks.clone().requires_grad_())
    return leaves


@settings(max_examples=40, deadline=None)
@given(cases(), st.sampled_from([1, 7, 2**22]))
def test_gradients_equal_autograd_of_the_whole_tensors(case, chunk_elements):
    q, k, v, spec, options = case
    scale = options["scale"] or q.shape[-1] ** -0.5
    ours = _inputs(q, k, v, options["sinks"])
    theirs = _inputs(q, k, v, options["sinks"])
    out = RecomputedAttention.apply(
        *ours[:3],
        ours[3] if len(ours) > 3 else None,
        spec,
        scale,
        options["softcap"],
        options["view"],
        chunk_elements,
    )
    sinks = theirs[3] if len(theirs) > 3 else None
    want = _attend(*theirs[:3], spec, {**options, "sinks": sinks}, need_weights="heads").head_out
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-10)
    upstream = torch.randn(out.shape, dtype=F64, generator=torch.Generator().manual_seed(3))
    got = torch.autograd.grad(out, ours, upstream)
    expected = torch.autograd.grad(want, theirs, upstream)
    for name, a, b in zip("qkvs"[: len(got)], got, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-9, msg=lambda m, n=name: f"{n}: {m}")


def test_against_finite_differences():
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 6, 5, 3, dtype=F64, generator=g)
    k = torch.randn(2, 2, 7, 3, dtype=F64, generator=g)
    v = torch.randn(2, 2, 7, 4, dtype=F64, generator=g)
    sinks = torch.randn(6, dtype=F64, generator=g)
    spec = MaskSpec(causal=True, q_offset=2, window=3, window_sinks=1)

    def f(q, k, v, sinks):
        return RecomputedAttention.apply(q, k, v, sinks, spec, 0.4, 1.5, None, 5)

    leaves = [t.requires_grad_() for t in (q, k, v, sinks)]
    assert torch.autograd.gradcheck(f, leaves)


def test_attend_takes_it_for_large_calls_and_keeps_no_weights(monkeypatch):
    """Through ``attend``: chosen once whole weights would pass MIN_RECOMPUTED, and what autograd
    keeps between forward and backward is Q, K, V and the sinks, not (q_pos, k_pos) tensors."""
    monkeypatch.setattr(kernel, "MIN_RECOMPUTED", 1)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 31, 8, dtype=F64, generator=g, requires_grad=True)
    k = torch.randn(1, 2, 31, 8, dtype=F64, generator=g, requires_grad=True)
    v = torch.randn(1, 2, 31, 8, dtype=F64, generator=g, requires_grad=True)
    saved = []
    keep = lambda t: saved.append(t.shape) or t  # noqa: E731
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        out = attend(q, k, v, MaskSpec(causal=True), AttendOptions(softcap=3.0)).head_out
    assert out.grad_fn is not None and "RecomputedAttention" in type(out.grad_fn).__name__
    assert all(31 not in shape[-2:] or shape[-1] == 8 for shape in saved), saved
    want = attend(
        q, k, v, MaskSpec(causal=True), AttendOptions(softcap=3.0, need_weights="heads")
    ).head_out
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), upstream)
    for a, b in zip(got, torch.autograd.grad(want, (q, k, v), upstream), strict=True):
        torch.testing.assert_close(a, b)

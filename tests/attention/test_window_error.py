"""The streamed window error is the error of the run a KV plan makes: the kernel with a
``KeyBudget`` on every head, with and without sink logits (gpt-oss keeps its sink column in the
masked softmax, so the renormalisation must keep it too)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import headlab.attention.kernel as kernel
from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.mask_spec import MaskSpec
from headlab.attention.sites import KeyBudget, Sites
from headlab.attention.streaming_sums import StatisticsRequest, window_error

F64 = torch.float64


@st.composite
def runs(draw):
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    batch = draw(st.sampled_from([1, 2]))
    heads, groups = draw(st.sampled_from([(6, 2), (6, 3), (4, 1), (3, 3)]))
    q_len = draw(st.integers(3, 11))
    d, dv = 5, 3
    q = torch.randn(batch, heads, q_len, d, generator=g, dtype=F64) * 2
    k = torch.randn(batch, groups, q_len, d, generator=g, dtype=F64)
    v = torch.randn(batch, groups, q_len, dv, generator=g, dtype=F64) + 0.5
    sinks = None
    if draw(st.booleans()):  # per-head sink logits, some large enough to take most weight
        sinks = torch.randn(heads, generator=g, dtype=F64) * 2 + 1
    window = (draw(st.integers(0, 2)), draw(st.integers(1, 4)))
    chunk = draw(st.sampled_from([1, 7, 10**6]))
    return q, k, v, MaskSpec(causal=draw(st.booleans())), sinks, window, chunk


@settings(max_examples=60, deadline=None)
@given(runs())
def test_window_error_is_the_error_of_the_budgeted_run(run):
    q, k, v, spec, sinks, window, chunk = run
    batch, heads, q_len, _ = q.shape
    collected = []
    request = StatisticsRequest(chunk_elements=chunk, window=window, report=collected.append)
    attend(q, k, v, spec, AttendOptions(sinks=sinks, statistics=request))
    full = attend(q, k, v, spec, AttendOptions(sinks=sinks)).head_out  # (batch, head, q_pos, dv)
    sites = Sites()
    sites.budget = KeyBudget(window[0], window[1], torch.ones(heads, dtype=torch.bool))
    kept = attend(q, k, v, spec, AttendOptions(sinks=sinks, sites=sites)).head_out
    lost = (full - kept).norm(dim=-1) / full.norm(dim=-1)  # (batch, head, q_pos)
    (sums,) = collected
    torch.testing.assert_close(
        sums.sums["window_error"], lost.sum(dim=(0, 2)), atol=1e-9, rtol=1e-9
    )
    assert sums.n_queries == batch * q_len


def test_without_the_sink_in_the_denominator_the_error_would_differ():
    """The case the sink changes: strong sink logits. Renormalising the same weights over the
    kept keys alone (the formula for a model without sinks) is not the budgeted run."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 3, 9, 4, generator=g, dtype=F64)
    k = torch.randn(1, 3, 9, 4, generator=g, dtype=F64)
    v = torch.randn(1, 3, 9, 2, generator=g, dtype=F64)
    sinks = torch.tensor([3.0, 0.0, -2.0], dtype=F64)
    spec = MaskSpec(causal=True)
    run = attend(q, k, v, spec, AttendOptions(sinks=sinks, need_weights="heads"))
    sites = Sites()
    sites.budget = KeyBudget(1, 2, torch.ones(3, dtype=torch.bool))
    kept = attend(q, k, v, spec, AttendOptions(sinks=sinks, sites=sites)).head_out
    want = (run.head_out - kept).norm(dim=-1) / run.head_out.norm(dim=-1)  # (1, head, q_pos)
    positions = torch.arange(9)
    with_sink, plain = (
        window_error(run.weights, v, run.head_out, positions, (1, 2), causal=True, sink_logits=s)
        for s in (True, False)
    )
    torch.testing.assert_close(with_sink, want, atol=1e-12, rtol=1e-12)
    assert (plain - want).abs().max() > 1e-2


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**16),
    st.sampled_from([(6, 2), (4, 1), (3, 3)]),
    st.integers(1, 150),
    st.integers(0, 3),
    st.sampled_from([1, 3, 70, 200]),
)
def test_the_banded_path_of_a_kv_plan_equals_the_explicit_weights(seed, shape, q_len, sinks, size):
    """A causal layer with a KeyBudget (a KV plan) takes the banded path: every head fused, the
    budgeted ones again over their sinks and window band, in blocks of max(64, window) queries;
    it must equal the explicit path (checked against the loop reference in test_kernel)."""
    heads, groups = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, q_len, 5, generator=g, dtype=F64)
    k = torch.randn(2, groups, q_len, 5, generator=g, dtype=F64)
    v = torch.randn(2, groups, q_len, 3, generator=g, dtype=F64)
    chosen = torch.rand(heads, generator=g) < 0.6
    spec = MaskSpec(causal=True, budget=KeyBudget(sinks, size, chosen))
    taken = []
    banded = kernel._banded

    def spy(*args, **kwargs):
        taken.append(True)
        return banded(*args, **kwargs)

    kernel._banded = spy
    try:
        with torch.no_grad():
            got = attend(q, k, v, spec).head_out
    finally:
        kernel._banded = banded
    want = attend(q, k, v, spec, AttendOptions(need_weights="heads")).head_out
    assert taken == [True]
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)

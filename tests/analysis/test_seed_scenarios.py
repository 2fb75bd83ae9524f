"""The three scenarios of the seed threads, checked against the seed's own code."""

from __future__ import annotations

import math

import pytest
import torch

from headlab.analysis import CompareRequest, build, explain, run_seed_scenarios, run_setup


def _seed_attention(query, key, value):
    """The first seed question's ``attention`` (Annotated Transformer), verbatim in spirit."""
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    return torch.matmul(scores.softmax(dim=-1), value)


def _seed_multi_head(x, weights, h):
    nbatches, d_model = x.size(0), x.size(-1)
    q, k, v = ((x @ w).view(nbatches, -1, h, d_model // h).transpose(1, 2) for w in weights)
    out = _seed_attention(q, k, v)
    return out.transpose(1, 2).contiguous().view(nbatches, -1, d_model)


def _seed_inputs(setup: CompareRequest):
    """The same draws, in the same order, as ``headlab.analysis.build`` for init='rand'."""
    gen = torch.Generator().manual_seed(setup.seed)
    e = setup.d_model
    weights = [torch.rand(e, e, generator=gen) for _ in range(3)]
    torch.rand(e, e, generator=gen)  # W_O draw (replaced by the identity without projection)
    x = torch.rand(setup.batch, setup.seq_len, e, generator=gen)
    return weights, x


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_first_question_agrees_with_an_independent_exact_comparison(seed):
    setup = CompareRequest(seed=seed)
    comparison = run_setup(setup)
    weights, x = _seed_inputs(setup)
    multi = _seed_multi_head(x, weights, 8)
    single = _seed_multi_head(x, weights, 1)
    assert comparison.identical == bool(torch.equal(multi, single))
    torch.testing.assert_close(comparison.output_a, multi, rtol=1e-5, atol=1e-2)
    assert comparison.rows_equal.tolist() == (multi == single).all(-1).tolist()
    codes = [f.code for f in comparison.findings]
    assert "saturated_same_key" in codes
    assert comparison.verdict == ("identical" if comparison.identical else "different")
    # rows that are not saturated on the same key are exactly the rows that differ
    saturated = next(f for f in comparison.findings if f.code == "saturated_same_key")
    assert bool((saturated.rows <= comparison.rows_equal).all())


def test_all_ones_initialisation_is_identical_by_saturation():
    comparison = run_setup(CompareRequest(init="ones", output_projection=True))
    assert comparison.verdict == "identical" and comparison.identical
    assert [f.code for f in comparison.findings] == ["saturated_same_key"]
    assert comparison.findings[0].fraction == 1.0


@pytest.mark.parametrize("init", ["normal", "xavier"])
def test_properly_scaled_weights_differ_by_partition(init):
    comparison = run_setup(CompareRequest(init=init, output_projection=True, seed=7))
    assert comparison.verdict == "different"
    assert [f.code for f in comparison.findings] == ["partition"]
    assert not comparison.gradients_equal
    assert comparison.params["a"] == comparison.params["b"] == 4 * 512 * 512 + 4 * 512


def hand_difference(setup) -> tuple[float, float]:
    """(max |diff|, largest |output|) of the set-up's two sides written out by hand in float64
    (``_by_hand``), independent of the module's forward and of ``compare``."""
    module, _, x = build(setup)
    module, x = module.double(), x.double()
    head_dim = setup.q_dim // setup.heads
    with torch.no_grad():
        many = _by_hand(module, x, setup.heads, setup.kv_heads or setup.heads, head_dim)
        few = _by_hand(module, x, setup.vs_heads, setup.vs_heads, setup.q_dim // setup.vs_heads)
    return float((many - few).abs().max()), float(many.abs().max())


@pytest.mark.parametrize("seed", [0, 3])
def test_run_seed_scenarios_answers_each_thread(seed):
    results = run_seed_scenarios(seed=seed)
    assert [r.name for r in results] == ["rand", "ones", "scaled"]
    for r in results:
        assert r.command.startswith("headlab compare") and r.setup["seed"] == seed
        assert r.explanation == explain(r.comparison)
        assert r.to_dict()["comparison"] == r.comparison.to_dict()
        # the verdict agrees with the two sides computed by hand (float32 rounding aside)
        diff, scale = hand_difference(CompareRequest(**r.setup))
        tolerance = 1e-4 * scale
        assert r.comparison.max_abs_diff == pytest.approx(diff, abs=tolerance)
        assert (r.comparison.verdict == "different") == (diff > tolerance)


def test_the_public_names_are_importable_from_the_package():
    import headlab

    m = headlab.MultiHeadAttention(12, 3, batch_first=True)
    x = torch.randn(2, 5, 12)
    c = headlab.compare(m, m.with_num_heads(1), x)
    assert isinstance(c, headlab.Comparison) and headlab.explain(c.result())
    assert headlab.parameter_count(m) == 4 * 12 * 12 + 4 * 12
    assert headlab.gradient_coupling(m, x).shape == (3, 3)


def _by_hand(module, x, heads, kv_heads, head_dim):
    """Grouped-query attention written out: each K/V head serves heads // kv_heads query heads."""
    w_q, w_k, w_v = module.projection_weights()
    widths = [w_q.shape[0], w_k.shape[0], w_v.shape[0]]
    bias = module.in_proj_bias
    bias = torch.zeros(sum(widths), dtype=x.dtype) if bias is None else bias
    b_q, b_k, b_v = bias.split(widths)
    batch, length, _ = x.shape
    q = (x @ w_q.T + b_q).view(batch, length, heads, head_dim).transpose(1, 2)
    k = (x @ w_k.T + b_k).view(batch, length, kv_heads, head_dim).transpose(1, 2)
    v = (x @ w_v.T + b_v).view(batch, length, kv_heads, head_dim).transpose(1, 2)
    k = k.repeat_interleave(heads // kv_heads, dim=1)  # (batch, head, k_pos, d_head)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    weights = torch.softmax(q @ k.transpose(-1, -2) / head_dim**0.5, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(batch, length, heads * head_dim)
    return module.out_proj(out)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_dim", "vs_heads"), [(4, 2, 16, 2), (6, 2, 5, 3)]
)
def test_kv_heads_and_head_dim_build_what_the_library_module_means(
    heads, kv_heads, head_dim, vs_heads
):
    setup = CompareRequest(
        d_model=12,
        heads=heads,
        vs_heads=vs_heads,
        seq_len=5,
        batch=2,
        init="normal",
        seed=2,
        output_projection=True,
        kv_heads=kv_heads,
        head_dim=head_dim,
    )
    a, b, x = build(setup)
    assert (a.num_heads, a.num_kv_heads, a.head_dim) == (heads, kv_heads, head_dim)
    view_dim = heads * head_dim // vs_heads
    assert (b.num_heads, b.head_dim, b.num_kv_heads) == (
        vs_heads,
        view_dim,
        kv_heads * head_dim // view_dim,
    )
    with torch.no_grad():
        for module in (a, b):
            got = module(x, x, x, need_weights=False)[0]
            want = _by_hand(module, x, module.num_heads, module.num_kv_heads, module.head_dim)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    comparison = run_setup(setup)
    with torch.no_grad():
        diff = (a(x, x, x, need_weights=False)[0] - b(x, x, x, need_weights=False)[0]).abs().max()
    assert comparison.max_abs_diff == pytest.approx(float(diff), rel=1e-5, abs=1e-6)


def test_head_sizes_that_do_not_split_are_refused_naming_the_arguments():
    with pytest.raises(ValueError, match="heads=8 is not divisible by kv_heads=3"):
        CompareRequest(kv_heads=3)
    with pytest.raises(ValueError, match="set output_projection"):
        CompareRequest(head_dim=32)
    with pytest.raises(ValueError, match="vs_heads=1 gives heads of 512"):
        CompareRequest(kv_heads=2)


def test_over_draws_counts_each_seed_as_its_own_comparison():
    """The summary over draws agrees with comparing each seed on its own."""
    from headlab.analysis.scenarios import CompareRequest, over_draws, run_setup

    summary = over_draws({}, range(4))
    expected = [s for s in range(4) if run_setup(CompareRequest(seed=s)).identical]
    assert summary.identical == expected
    assert summary.share_identical == len(expected) / 4
    assert sum(summary.findings.values()) == 4
    assert f"{len(expected)} came out identical" in summary.sentence()

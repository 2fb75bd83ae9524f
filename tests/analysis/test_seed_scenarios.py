"""The three scenarios of the seed threads, checked against the seed's own code."""

from __future__ import annotations

import math

import pytest
import torch

from headlab.analysis import CompareSetup, explain, run_seed_scenarios, run_setup


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


def _seed_inputs(setup: CompareSetup):
    """The same draws, in the same order, as ``headlab.analysis.build`` for init='rand'."""
    gen = torch.Generator().manual_seed(setup.seed)
    e = setup.d_model
    weights = [torch.rand(e, e, generator=gen) for _ in range(3)]
    torch.rand(e, e, generator=gen)  # W_O draw (replaced by the identity without projection)
    x = torch.rand(setup.batch, setup.seq_len, e, generator=gen)
    return weights, x


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_first_question_agrees_with_an_independent_exact_comparison(seed):
    setup = CompareSetup(seed=seed)
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
    comparison = run_setup(CompareSetup(init="ones", output_projection=True))
    assert comparison.verdict == "identical" and comparison.identical
    assert [f.code for f in comparison.findings] == ["saturated_same_key"]
    assert comparison.findings[0].fraction == 1.0


@pytest.mark.parametrize("init", ["normal", "xavier"])
def test_properly_scaled_weights_differ_by_partition(init):
    comparison = run_setup(CompareSetup(init=init, output_projection=True, seed=7))
    assert comparison.verdict == "different"
    assert [f.code for f in comparison.findings] == ["partition"]
    assert not comparison.gradients_equal
    assert comparison.params["a"] == comparison.params["b"] == 4 * 512 * 512 + 4 * 512


def test_run_seed_scenarios_answers_each_thread():
    results = run_seed_scenarios()
    assert [r.name for r in results] == ["rand", "ones", "scaled"]
    assert [r.comparison.verdict for r in results] == ["identical", "identical", "different"]
    for r in results:
        assert r.command.startswith("headlab compare")
        assert r.explanation == explain(r.comparison)
        assert r.to_dict()["comparison"] == r.comparison.to_dict()


def test_the_public_names_are_importable_from_the_package():
    import headlab

    m = headlab.MultiHeadAttention(12, 3, batch_first=True)
    x = torch.randn(2, 5, 12)
    c = headlab.compare(m, m.with_num_heads(1), x)
    assert isinstance(c, headlab.Comparison) and headlab.explain(c)
    assert headlab.parameter_count(m) == 4 * 12 * 12 + 4 * 12
    assert headlab.gradient_coupling(m, x).shape == (3, 3)

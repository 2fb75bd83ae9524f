"""The rank bound of one head, the fitted KL floor, and the one-pattern limit."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headlab.analysis.expressivity import (
    ExpressivityRequest,
    fit_offsets,
    fit_patterns,
    measure_expressivity,
    random_targets,
    row_kl,
    score_rank,
)
from headlab.attention import MultiHeadAttention
from headlab.results.expressivity_result import ExpressivityResult


@given(
    head_dim=st.integers(1, 7),
    heads=st.integers(1, 3),
    pos=st.sampled_from([5, 11, 13]),
    seed=st.integers(0, 2**16),
)
def test_score_rank_is_at_most_head_dim(head_dim, heads, pos, seed):
    """A head of size d gives scores of rank <= d; generic weights reach min(d, pos, E)."""
    torch.manual_seed(seed)
    embed = 17
    module = MultiHeadAttention(embed, heads, head_dim=head_dim, dtype=torch.float64)
    x = torch.randn(pos, embed, dtype=torch.float64)
    ranks = score_rank(module, x)
    assert len(ranks) == heads
    assert all(r == min(head_dim, pos) for r in ranks)


def test_score_rank_independent_computation():
    """Against numpy's matrix_rank of Q_i K_i^T built by hand from the weights."""
    torch.manual_seed(5)
    module = MultiHeadAttention(12, 3, head_dim=2, bias=False, dtype=torch.float64)
    x = torch.randn(7, 12, dtype=torch.float64)
    w_q, w_k, _ = (w.detach().numpy() for w in module.projection_weights())
    xn = x.numpy()
    for i, r in enumerate(score_rank(module, x)):
        q, k = xn @ w_q[2 * i : 2 * i + 2].T, xn @ w_k[2 * i : 2 * i + 2].T
        assert r == np.linalg.matrix_rank(q @ k.T) == 2


def test_row_kl_hand_case():
    target = torch.tensor([[0.5, 0.5], [1.0, 0.0]], dtype=torch.float64)
    logits = torch.log(torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64))
    expected = (0.5 * np.log(0.5 / 0.25) + 0.5 * np.log(0.5 / 0.75) + np.log(2.0)) / 2
    assert float(row_kl(target, logits)) == pytest.approx(expected, rel=1e-12)


def test_targets_are_row_stochastic():
    t = random_targets(7, 3, seed=2)
    assert t.shape == (3, 7, 7)
    np.testing.assert_allclose(t.sum(-1), 1.0, rtol=1e-12)
    assert (t > 0).all()


@pytest.mark.slow
def test_kl_floor_below_n_and_none_at_n():
    """n = 7: a head of 1 cannot fit random targets (floor), a head of 7 fits them."""
    targets = random_targets(7, 2, seed=11)
    low = fit_patterns(targets, 1, steps=300)
    full = fit_patterns(targets, 7, steps=600)
    assert (low > 0.1).all()
    assert (full < 2e-3).all()


def test_fit_patterns_reaches_a_representable_target():
    """A target that is softmax of a rank-2 score matrix is fitted by a head of 2 (n = 11)."""
    rng = np.random.default_rng(3)
    s = rng.standard_normal((11, 2)) @ rng.standard_normal((2, 11))
    t = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
    assert fit_patterns(t[None], 2, steps=800)[0] < 2e-3


def test_fit_patterns_rejects_non_square():
    with pytest.raises(ValueError, match=r"\(count, n, n\)"):
        fit_patterns(np.ones((2, 3, 4)) / 4, 2)


@pytest.mark.slow
def test_one_head_cannot_copy_several_offsets():
    """3 offsets at once (d_model 21, n 7): 3 heads of 7 beat 1 head of 21 by a wide margin."""
    one = fit_offsets(1, blocks=3, n=7, d_model=21, steps=300)
    three = fit_offsets(3, blocks=3, n=7, d_model=21, steps=300)
    assert one > 0.3
    assert three < one / 3


def test_result_round_trip_and_schema():
    config = ExpressivityRequest(
        seq_lens=(5,),
        head_dims=(1, 5),
        targets=1,
        steps=20,
        d_model=12,
        heads=2,
        offset_seq_len=5,
        offset_steps=5,
    )
    seen = []
    result = measure_expressivity(config, on_step=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (4, 4)
    assert {(r.head_dim, r.seq_len) for r in result.rank} == {(1, 5), (5, 5)}
    assert all(isinstance(r.kl, float) for r in result.rank)
    assert [(p.num_heads, p.head_dim) for p in result.patterns] == [(1, 12), (2, 6)]
    assert ExpressivityResult.from_dict(result.to_dict()) == result
    with pytest.raises(ValueError, match="missing"):
        ExpressivityResult.from_dict({"rank": []})

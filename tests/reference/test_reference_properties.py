"""Properties of the NumPy reference, checked on hypothesis-generated shapes, values and masks."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.reference import attention, attention_backward, softmax


@st.composite
def problems(draw):
    """(q, k, v, bool mask) with shapes (batch, head, q_pos|k_pos, d_head) and a random mask."""
    batch, heads = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    q_pos, k_pos, d_head = draw(st.integers(1, 6)), draw(st.integers(1, 7)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([0.1, 1.0, 30.0]))  # 30: saturated softmax rows
    q = rng.normal(size=(batch, heads, q_pos, d_head)) * scale
    k = rng.normal(size=(batch, heads, k_pos, d_head))
    v = rng.normal(size=(batch, heads, k_pos, d_head))
    mask = rng.random((batch, heads, q_pos, k_pos)) < density
    return q, k, v, mask


FAST = settings(max_examples=40, deadline=None)


@FAST
@given(problems())
def test_rows_sum_to_one_or_zero_when_fully_masked(problem) -> None:
    q, k, v, mask = problem
    out, weights = attention(q, k, v, mask)
    dead = mask.all(axis=-1)  # (batch, head, q_pos)
    assert np.isfinite(out).all() and np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(axis=-1), np.where(dead, 0.0, 1.0), atol=1e-12)
    assert (weights >= 0).all()


@FAST
@given(problems())
def test_masked_keys_get_zero_weight(problem) -> None:
    q, k, v, mask = problem
    _, weights = attention(q, k, v, mask)
    assert (weights[mask] == 0).all()


@FAST
@given(problems(), st.integers(0, 2**32 - 1))
def test_permuting_keys_with_values_changes_nothing(problem, seed: int) -> None:
    q, k, v, mask = problem
    perm = np.random.default_rng(seed).permutation(k.shape[-2])
    out, weights = attention(q, k, v, mask)
    out_p, weights_p = attention(q, k[..., perm, :], v[..., perm, :], mask[..., perm])
    np.testing.assert_allclose(out_p, out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(weights_p, weights[..., perm], rtol=1e-12, atol=1e-12)


@FAST
@given(problems())
def test_bool_mask_equals_float_mask_with_minus_inf(problem) -> None:
    q, k, v, mask = problem
    out_b, w_b = attention(q, k, v, mask)
    out_f, w_f = attention(q, k, v, np.where(mask, -np.inf, 0.0))
    np.testing.assert_array_equal(w_b, w_f)
    np.testing.assert_array_equal(out_b, out_f)


@FAST
@given(problems(), st.integers(0, 2**32 - 1))
def test_fully_masked_rows_are_zero_and_send_no_gradient(problem, seed: int) -> None:
    q, k, v, mask = problem
    rng = np.random.default_rng(seed)
    mask = mask.copy()
    mask[..., 0, :] = True  # at least one dead query row everywhere
    dead = mask.all(axis=-1)
    out, weights = attention(q, k, v, mask)
    assert (out[dead] == 0).all() and (weights[dead] == 0).all()
    d_out = rng.normal(size=out.shape)
    dq, dk, dv = attention_backward(d_out, q, k, v, weights)
    assert (dq[dead] == 0).all()
    # Whatever the upstream gradient says on dead rows, nothing else moves.
    d_out2 = d_out.copy()
    d_out2[dead] = rng.normal(size=d_out2[dead].shape) * 100
    for g1, g2 in zip((dq, dk, dv), attention_backward(d_out2, q, k, v, weights), strict=True):
        np.testing.assert_array_equal(g1, g2)
        assert np.isfinite(g2).all()


@FAST
@given(problems(), st.floats(-50, 50))
def test_softmax_ignores_a_constant_shift_per_row(problem, shift: float) -> None:
    q, k, _, _ = problem
    scores = q @ np.swapaxes(k, -1, -2)
    np.testing.assert_allclose(softmax(scores + shift), softmax(scores), rtol=1e-9, atol=1e-12)


def test_softmax_of_all_minus_inf_rows_is_zero_not_nan() -> None:
    x = np.array([[-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 1e308]])
    with np.errstate(invalid="raise", divide="raise", over="raise"):  # no 0/0, no inf - inf
        p = softmax(x)
    np.testing.assert_array_equal(p, [[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])

"""The NumPy reference forward equals headlab.MultiHeadAttention (float64, many configurations)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_bridge import (
    CONFIGS,
    MASK_KINDS,
    make_inputs,
    make_masks,
    make_module,
    params_from_module,
)

from headlab.reference import multi_head_attention

TOL = {"rtol": 1e-12, "atol": 1e-12}


def _run_both(cfg_name: str, mask_kind: str, head_mask: np.ndarray | None = None):
    cfg = CONFIGS[cfg_name]
    mha = make_module(cfg).eval()
    x_q, x_k, x_v = make_inputs(cfg)
    kwargs, ref_mask = make_masks(mask_kind, cfg)
    hm = None if head_mask is None else torch.from_numpy(head_mask)
    with torch.no_grad():
        trace = mha.trace(x_q, x_k, x_v, head_mask=hm, **kwargs)
        fast, _ = mha(x_q, x_k, x_v, need_weights=False, head_mask=hm, **kwargs)
    out, cache = multi_head_attention(
        x_q.numpy(), x_k.numpy(), x_v.numpy(), params_from_module(mha), ref_mask, head_mask
    )
    return trace, fast, out, cache


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
def test_forward_matches_module(cfg_name: str, mask_kind: str) -> None:
    trace, fast, out, cache = _run_both(cfg_name, mask_kind)
    assert out.shape == tuple(trace.output.shape) and out.dtype == np.float64
    np.testing.assert_allclose(cache.q, trace.q.numpy(), **TOL)
    np.testing.assert_allclose(cache.k, trace.k.numpy(), **TOL)
    np.testing.assert_allclose(cache.v, trace.v.numpy(), **TOL)
    np.testing.assert_allclose(cache.weights, trace.weights.numpy(), **TOL)
    np.testing.assert_allclose(cache.head_outputs, trace.head_outputs.numpy(), **TOL)
    np.testing.assert_allclose(out, trace.output.numpy(), **TOL)
    np.testing.assert_allclose(out, fast.numpy(), rtol=1e-10, atol=1e-10)
    assert np.isfinite(out).all()


@pytest.mark.parametrize("per_example", [False, True])
def test_head_mask_matches_module(per_example: bool) -> None:
    cfg = CONFIGS["gqa"]
    shape = (cfg.batch, cfg.num_heads) if per_example else (cfg.num_heads,)
    head_mask = np.random.default_rng(3).normal(size=shape)
    trace, fast, out, cache = _run_both("gqa", "bool_2d", head_mask)
    np.testing.assert_allclose(cache.head_outputs, trace.head_outputs.numpy(), **TOL)
    np.testing.assert_allclose(out, trace.output.numpy(), **TOL)
    np.testing.assert_allclose(out, fast.numpy(), rtol=1e-10, atol=1e-10)


def test_one_hand_computed_case() -> None:
    """One head, d_head 1, two keys: every number below is worked out on paper."""
    from headlab.reference import attention

    q = np.array([[2.0]])
    k = np.array([[1.0], [0.0]])
    v = np.array([[10.0], [20.0]])
    out, w = attention(q, k, v)  # scores (2, 0), weights (e^2, 1) / (e^2 + 1)
    e2 = np.exp(2.0)
    np.testing.assert_allclose(w, [[e2 / (e2 + 1), 1 / (e2 + 1)]], rtol=1e-15)
    np.testing.assert_allclose(out, [[(10 * e2 + 20) / (e2 + 1)]], rtol=1e-15)

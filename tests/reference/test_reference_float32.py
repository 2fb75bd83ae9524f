"""float32 works: dtypes are preserved and the results stay close to float64 and to torch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch_bridge import CONFIGS, make_inputs, make_masks, make_module, params_from_module

from headlab.reference import MultiHeadParams, multi_head_attention, multi_head_attention_backward


def _as32(params: MultiHeadParams) -> MultiHeadParams:
    arrays = {
        f.name: getattr(params, f.name).astype(np.float32)
        for f in dataclasses.fields(params)
        if isinstance(getattr(params, f.name), np.ndarray)
    }
    return dataclasses.replace(params, **arrays)


@pytest.mark.parametrize("cfg_name", ["gqa", "kdim_vdim"])
def test_float32_preserves_dtype_and_matches_float64(cfg_name: str) -> None:
    cfg = CONFIGS[cfg_name]
    params64 = params_from_module(make_module(cfg, seed=24))
    xs64 = [x.numpy() for x in make_inputs(cfg, seed=25)]
    _, mask = make_masks("dead_row", cfg)
    out64, cache64 = multi_head_attention(*xs64, params64, mask)
    out32, cache32 = multi_head_attention(
        *(x.astype(np.float32) for x in xs64), _as32(params64), mask
    )
    assert out32.dtype == np.float32 and cache32.weights.dtype == np.float32
    np.testing.assert_allclose(out32, out64, rtol=1e-4, atol=1e-4)
    d_out = np.random.default_rng(26).normal(size=out64.shape)
    g64 = multi_head_attention_backward(d_out, cache64)
    g32 = multi_head_attention_backward(d_out.astype(np.float32), cache32)
    for name, value in vars(g32).items():
        if value is None:
            continue
        assert value.dtype == np.float32, name
        ref = getattr(g64, name)
        # atol >= 1e-3: d b_K is exactly zero in theory (softmax ignores a shift per row).
        atol = 1e-3 * max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(value, ref, rtol=1e-3, atol=atol, err_msg=name)


def test_float32_matches_torch_float32_module() -> None:
    cfg = CONFIGS["free_head_dim"]
    mha = make_module(cfg, seed=27, dtype=torch.float32)
    xs = make_inputs(cfg, seed=28, dtype=torch.float32)
    with torch.no_grad():
        out_t, _ = mha(*xs, need_weights=False, is_causal=True, attn_mask=None)
    _, mask = make_masks("causal", cfg)
    out, _ = multi_head_attention(*(x.numpy() for x in xs), params_from_module(mha), mask)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, out_t.numpy(), rtol=1e-5, atol=1e-5)


def test_mixed_dtypes_are_rejected() -> None:
    cfg = CONFIGS["free_head_dim"]
    params = params_from_module(make_module(cfg))
    x_q, x_k, x_v = (x.numpy() for x in make_inputs(cfg))
    with pytest.raises(ValueError, match="x_q dtype must be float64"):
        multi_head_attention(x_q.astype(np.float32), x_k, x_v, params)

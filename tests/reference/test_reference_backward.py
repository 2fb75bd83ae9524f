"""The hand-written backward equals torch autograd through headlab.MultiHeadAttention and central
finite differences (float64, random non-zero weights and biases, distinct sizes)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch_bridge import (
    CONFIGS,
    make_inputs,
    make_masks,
    make_module,
    module_arrays,
    params_from_module,
)

from headlab.reference import multi_head_attention, multi_head_attention_backward

PARAM_NAMES = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")
ALL_NAMES = (*PARAM_NAMES, "x_q", "x_k", "x_v", "head_mask")


def _autograd(cfg_name, mask_kind, *, need_weights, head_mask_shape=None, self_attention=False):
    """Run the torch module and the reference on the same data; return both sets of gradients."""
    cfg = CONFIGS[cfg_name]
    mha = make_module(cfg, seed=5)
    x_q, x_k, x_v = make_inputs(cfg, seed=6)
    if self_attention:
        assert cfg.kdim is None and cfg.vdim is None
        x_q = x_v = x_k  # one tensor: the module takes its packed in_proj path
    kwargs, ref_mask = make_masks(mask_kind, dataclasses.replace(cfg, q_len=x_q.shape[1]))
    rng = np.random.default_rng(7)
    head_mask = None if head_mask_shape is None else rng.normal(size=head_mask_shape)
    leaves = [t.clone().requires_grad_() for t in (x_q, x_k, x_v)]
    if self_attention:
        leaves = [leaves[0]] * 3
    hm = None if head_mask is None else torch.tensor(head_mask, requires_grad=True)
    out, _ = mha(*leaves, need_weights=need_weights, head_mask=hm, **kwargs)
    d_out = rng.normal(size=tuple(out.shape))
    out.backward(torch.from_numpy(d_out))
    ref_out, cache = multi_head_attention(
        x_q.numpy(), x_k.numpy(), x_v.numpy(), params_from_module(mha), ref_mask, head_mask
    )
    np.testing.assert_allclose(ref_out, out.detach().numpy(), rtol=1e-10, atol=1e-10)
    grads = multi_head_attention_backward(d_out, cache)
    torch_grads = module_arrays(mha, grad=True)
    if self_attention:
        torch_grads["x"] = leaves[0].grad.numpy()
    else:
        for name, leaf in zip(("x_q", "x_k", "x_v"), leaves, strict=True):
            torch_grads[name] = leaf.grad.numpy()
    if hm is not None:
        torch_grads["head_mask"] = hm.grad.numpy()
    return grads, torch_grads


def _assert_grads_equal(grads, torch_grads, tol: float) -> None:
    for name in ALL_NAMES:
        if name not in torch_grads:
            continue
        ours, theirs = getattr(grads, name), torch_grads[name]
        if theirs is None:
            assert ours is None, name
            continue
        assert ours.shape == theirs.shape, name
        if name != "b_k":  # d b_K is zero in theory (test_key_bias_gets_no_gradient)
            assert np.abs(theirs).max() > 1e-6, f"{name}: zero gradient cannot test anything"
        np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol, err_msg=name)
    if "x" in torch_grads:
        np.testing.assert_allclose(
            grads.x_q + grads.x_k + grads.x_v, torch_grads["x"], rtol=tol, atol=tol
        )


@pytest.mark.parametrize("mask_kind", ["none", "float_2d", "key_padding", "dead_row"])
@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
def test_backward_matches_autograd(cfg_name: str, mask_kind: str) -> None:
    grads, torch_grads = _autograd(cfg_name, mask_kind, need_weights=True)
    _assert_grads_equal(grads, torch_grads, 1e-10)


@pytest.mark.parametrize("cfg_name", ["gqa", "kdim_vdim", "no_bias"])
def test_backward_matches_fused_path(cfg_name: str) -> None:
    """The SDPA path (need_weights=False) has its own backward kernel: check it too."""
    grads, torch_grads = _autograd(cfg_name, "bool_3d", need_weights=False)
    _assert_grads_equal(grads, torch_grads, 1e-9)


@pytest.mark.parametrize("shape", ["per_head", "per_example"])
def test_head_mask_gradient_matches_autograd(shape: str) -> None:
    cfg = CONFIGS["gqa"]
    hm_shape = (cfg.num_heads,) if shape == "per_head" else (cfg.batch, cfg.num_heads)
    grads, torch_grads = _autograd("gqa", "causal", need_weights=True, head_mask_shape=hm_shape)
    _assert_grads_equal(grads, torch_grads, 1e-10)
    np.testing.assert_allclose(
        grads.head_mask_per_example.sum(axis=0)
        if shape == "per_head"
        else grads.head_mask_per_example,
        torch_grads["head_mask"],
        rtol=1e-10,
        atol=1e-10,
    )


def test_self_attention_sums_input_gradients() -> None:
    grads, torch_grads = _autograd("e_over_h", "causal", need_weights=False, self_attention=True)
    _assert_grads_equal(grads, torch_grads, 1e-10)


def test_key_bias_gets_no_gradient() -> None:
    """q . (k_j + b_K) shifts every score of a row by q . b_K: softmax ignores it, so d b_K = 0."""
    grads, torch_grads = _autograd("gqa", "key_padding", need_weights=True)
    scale = np.abs(grads.w_k).max()
    assert scale > 1e-3
    assert np.abs(grads.b_k).max() < 1e-12 * scale
    assert np.abs(torch_grads["b_k"]).max() < 1e-12 * scale


# ----------------------------------------------------------------- finite differences
def _loss(params, x, mask, head_mask, r) -> float:
    out, _ = multi_head_attention(x["x_q"], x["x_k"], x["x_v"], params, mask, head_mask)
    return float(np.sum(out * r))


@pytest.mark.parametrize("cfg_name", ["gqa", "kdim_vdim", "free_head_dim"])
def test_backward_matches_finite_differences(cfg_name: str) -> None:
    cfg = CONFIGS[cfg_name]
    params = params_from_module(make_module(cfg, seed=8))
    x = dict(zip(("x_q", "x_k", "x_v"), (t.numpy() for t in make_inputs(cfg, seed=9)), strict=True))
    _, mask = make_masks("dead_row", cfg)
    rng = np.random.default_rng(10)
    head_mask = rng.normal(size=cfg.num_heads) + 1.0
    r = rng.normal(size=(cfg.batch, cfg.q_len, cfg.embed_dim))
    _, cache = multi_head_attention(x["x_q"], x["x_k"], x["x_v"], params, mask, head_mask)
    grads = multi_head_attention_backward(r, cache)
    eps = 1e-6
    for name in ALL_NAMES:
        if name in PARAM_NAMES:
            base = getattr(params, name)
        else:
            base = head_mask if name == "head_mask" else x[name]
        for _ in range(3):
            idx = tuple(int(rng.integers(n)) for n in base.shape)
            values = []
            for sign in (1, -1):
                moved = base.copy()
                moved[idx] += sign * eps
                p, xx, hm = params, dict(x), head_mask
                if name in PARAM_NAMES:
                    p = dataclasses.replace(params, **{name: moved})
                elif name == "head_mask":
                    hm = moved
                else:
                    xx[name] = moved
                values.append(_loss(p, xx, mask, hm, r))
            numeric = (values[0] - values[1]) / (2 * eps)
            analytic = getattr(grads, name)[idx]
            assert abs(numeric - analytic) <= 1e-6 * max(1.0, abs(analytic)), (name, idx)

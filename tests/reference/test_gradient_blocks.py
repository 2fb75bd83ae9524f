"""Block structure of the gradient: head i's rows of dW_Q, dW_K, dW_V (torch's (out, in) layout;
columns in the X W layout) do not move when only another head's upstream gradient changes.

    dW_Q = [X^T dQ_1 | ... | X^T dQ_h]   (X W layout)

and dQ_i depends only on head i's P_i, K_i, V_i and the gradient reaching head i's output block.

The upstream gradient is fed at the head outputs (before W_O): directly in the reference
(head_outputs_backward), and through trace().head_outputs in the torch module.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_bridge import CONFIGS, make_inputs, make_masks, make_module, params_from_module

from headlab.reference import head_outputs_backward, multi_head_attention


def _rows(head: int, d_head: int) -> slice:
    return slice(head * d_head, (head + 1) * d_head)


def _perturbed(d_heads: np.ndarray, head: int, seed: int) -> np.ndarray:
    """d_heads with head ``head``'s block (batch, q_pos, d_head) replaced by other numbers."""
    moved = d_heads.copy()
    moved[:, head] = np.random.default_rng(seed).normal(size=moved[:, head].shape) * 3.0
    return moved


def _check_blocks(grad_pair, changed: int, num_heads: int, num_kv_heads: int, d_head: int):
    """grad_pair: {name: (before, after)} for w_q, w_k, w_v in torch layout."""
    group = num_heads // num_kv_heads
    for name, (before, after) in grad_pair.items():
        count = num_heads if name == "w_q" else num_kv_heads
        touched = changed if name == "w_q" else changed // group
        for block in range(count):
            b, a = before[_rows(block, d_head)], after[_rows(block, d_head)]
            if block == touched:
                assert np.abs(a - b).max() > 1e-3, f"{name} block {block} should change"
            else:
                np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13, err_msg=f"{name} {block}")


@pytest.mark.parametrize("cfg_name", ["free_head_dim", "e_over_h", "gqa", "kdim_vdim"])
def test_reference_head_blocks_decouple(cfg_name: str) -> None:
    cfg = CONFIGS[cfg_name]
    mha = make_module(cfg, seed=13)
    params = params_from_module(mha)
    xs = [x.numpy() for x in make_inputs(cfg, seed=14)]
    _, mask = make_masks("bool_2d", cfg)
    _, cache = multi_head_attention(*xs, params, mask)
    d_heads = np.random.default_rng(15).normal(size=cache.head_outputs.shape)
    base = head_outputs_backward(d_heads, cache)
    for changed in range(cfg.num_heads):
        moved = head_outputs_backward(_perturbed(d_heads, changed, 16 + changed), cache)
        pairs = {n: (getattr(base, n), getattr(moved, n)) for n in ("w_q", "w_k", "w_v")}
        _check_blocks(pairs, changed, params.num_heads, params.num_kv_heads, params.head_dim)


def _torch_head_grads(mha, xs, d_heads: np.ndarray) -> dict[str, np.ndarray]:
    w_q, w_k, w_v = mha.projection_weights()
    trace = mha.trace(*xs)
    grads = torch.autograd.grad(
        trace.head_outputs, [mha.in_proj_weight], grad_outputs=torch.from_numpy(d_heads)
    )[0]
    sizes = [w_q.shape[0], w_k.shape[0], w_v.shape[0]]
    return dict(zip(("w_q", "w_k", "w_v"), (g.numpy() for g in grads.split(sizes)), strict=True))


@pytest.mark.parametrize("cfg_name", ["free_head_dim", "gqa"])
def test_module_head_blocks_decouple_and_match_reference(cfg_name: str) -> None:
    cfg = CONFIGS[cfg_name]
    mha = make_module(cfg, seed=17)
    xs = make_inputs(cfg, seed=18)
    d_heads = np.random.default_rng(19).normal(
        size=(cfg.batch, cfg.num_heads, cfg.q_len, mha.head_dim)
    )
    _, cache = multi_head_attention(*(x.numpy() for x in xs), params_from_module(mha))
    base = _torch_head_grads(mha, xs, d_heads)
    ref = head_outputs_backward(d_heads, cache)
    for name, g in base.items():
        np.testing.assert_allclose(getattr(ref, name), g, rtol=1e-10, atol=1e-10, err_msg=name)
    changed = cfg.num_heads - 1
    moved = _torch_head_grads(mha, xs, _perturbed(d_heads, changed, 20))
    pairs = {n: (base[n], moved[n]) for n in base}
    _check_blocks(pairs, changed, mha.num_heads, mha.num_kv_heads, mha.head_dim)


def test_one_head_couples_every_block() -> None:
    """The contrast: the same width as one head, every column block of dW_Q moves together."""
    cfg = CONFIGS["one_head"]
    mha = make_module(cfg, seed=21)
    xs = [x.numpy() for x in make_inputs(cfg, seed=22)]
    _, cache = multi_head_attention(*xs, params_from_module(mha))
    d_heads = np.random.default_rng(23).normal(size=cache.head_outputs.shape)
    moved = d_heads.copy()
    moved[..., :4] += 1.0  # only the first 4 of 12 output columns of the single head
    before, after = head_outputs_backward(d_heads, cache), head_outputs_backward(moved, cache)
    for block in (slice(4, 8), slice(8, 12)):  # rows outside the changed columns move too
        assert np.abs(after.w_q[block] - before.w_q[block]).max() > 1e-3

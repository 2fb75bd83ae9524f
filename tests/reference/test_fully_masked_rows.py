"""A query row with every key masked: zero in headlab (reference and module), NaN in torch.

torch.nn.MultiheadAttention (torch 2.13) gives NaN on such a row with need_weights=True (its
explicit softmax divides 0 by 0) and a finite row with need_weights=False (SDPA returns zeros for
the head outputs, so the row equals out_proj.bias). headlab gives the finite answer in both
paths, and so does the reference. If torch changes this, the torch half of this test says so.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_bridge import CONFIGS, make_inputs, make_masks, make_module, params_from_module

from headlab.reference import multi_head_attention, multi_head_attention_backward


def _dead_row_setup():
    cfg = CONFIGS["e_over_h"]  # head_dim = E / H, so torch's module can load the same weights
    mha = make_module(cfg, seed=11)
    x_q, x_k, x_v = make_inputs(cfg, seed=12)
    kwargs, ref_mask = make_masks("dead_row", cfg)
    dead = ref_mask.all(axis=-1)  # (batch, head, q_pos); row (0, :, 1) is dead in every head
    assert dead[0, :, 1].all()
    return cfg, mha, (x_q, x_k, x_v), kwargs, ref_mask


@pytest.mark.parametrize("need_weights", [True, False])
def test_headlab_module_gives_zero_head_output_and_gradient(need_weights: bool) -> None:
    _, mha, xs, kwargs, _ = _dead_row_setup()
    leaves = [x.clone().requires_grad_() for x in xs]
    out, weights = mha(*leaves, need_weights=need_weights, average_attn_weights=False, **kwargs)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, 1], mha.out_proj.bias.detach().clone(), rtol=0, atol=1e-12)
    if need_weights:
        assert (weights[0, :, 1] == 0).all()
    out.sum().backward()
    assert torch.isfinite(leaves[0].grad).all()
    assert (leaves[0].grad[0, 1] == 0).all()  # the dead query receives no gradient
    trace = mha.trace(*xs, **kwargs)
    assert (trace.head_outputs[0, :, 1] == 0).all()


def test_reference_gives_zero_output_and_gradient() -> None:
    _, mha, xs, _, ref_mask = _dead_row_setup()
    params = params_from_module(mha)
    out, cache = multi_head_attention(*(x.numpy() for x in xs), params, ref_mask)
    np.testing.assert_array_equal(cache.head_outputs[0, :, 1], 0.0)
    np.testing.assert_allclose(out[0, 1], params.b_o, rtol=0, atol=1e-12)
    grads = multi_head_attention_backward(np.ones_like(out), cache)
    np.testing.assert_array_equal(grads.x_q[0, 1], 0.0)
    assert all(np.isfinite(g).all() for g in vars(grads).values() if g is not None)


@pytest.mark.parametrize("need_weights", [True, False])
def test_torch_multihead_attention_differs_on_fully_masked_rows(need_weights: bool) -> None:
    """Documents torch's behaviour (the reason headlab states its own convention)."""
    _, mha, xs, kwargs, _ = _dead_row_setup()
    ours = mha.eval()
    theirs = torch.nn.MultiheadAttention(
        mha.embed_dim, mha.num_heads, batch_first=True, dtype=torch.float64
    ).eval()
    theirs.load_state_dict(ours.state_dict())
    with torch.no_grad():
        out_theirs, _ = theirs(*xs, need_weights=need_weights, **kwargs)
        out_ours, _ = ours(*xs, need_weights=need_weights, **kwargs)
    alive = torch.ones(out_ours.shape[:2], dtype=torch.bool)
    alive[0, 1] = False
    torch.testing.assert_close(out_theirs[alive], out_ours[alive])  # same layer elsewhere
    if need_weights:
        assert torch.isnan(out_theirs[0, 1]).all()
    else:
        torch.testing.assert_close(out_theirs[0, 1], out_ours[0, 1])
    assert torch.isfinite(out_ours).all()

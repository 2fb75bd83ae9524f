"""Behaviour beyond torch's interface: trace, head_mask, GQA, free head size, with_num_heads."""

from __future__ import annotations

import pytest
import torch

from headlab import MultiHeadAttention

F64 = torch.float64
B, LQ, LK, E, H = 2, 5, 7, 12, 3  # distinct sizes so that a swapped axis fails


def _module(**kwargs) -> MultiHeadAttention:
    torch.manual_seed(kwargs.pop("seed", 0))
    m = MultiHeadAttention(
        kwargs.pop("embed_dim", E),
        kwargs.pop("num_heads", H),
        batch_first=True,
        dtype=F64,
        **kwargs,
    )
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-0.6, 0.8)
    return m


def _x(length=LQ, width=E, seed=1):
    return torch.randn(B, length, width, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _manual_attention(m: MultiHeadAttention, xq, xkv):
    """Multi-head attention written out head by head from the parameters (the test's own math)."""
    w_q, w_k, w_v = m.projection_weights()
    b_q, b_k, b_v = m.projection_biases()
    d, group = m.head_dim, m.num_heads // m.num_kv_heads
    heads = []
    for i in range(m.num_heads):
        g = i // group
        q = xq @ w_q[i * d : (i + 1) * d].T + b_q[i * d : (i + 1) * d]
        k = xkv @ w_k[g * d : (g + 1) * d].T + b_k[g * d : (g + 1) * d]
        v = xkv @ w_v[g * d : (g + 1) * d].T + b_v[g * d : (g + 1) * d]
        p = torch.softmax(q @ k.transpose(-1, -2) / d**0.5, dim=-1)
        heads.append(p @ v)
    return torch.cat(heads, dim=-1) @ m.out_proj.weight.T + m.out_proj.bias


@pytest.mark.parametrize(
    ("num_heads", "head_dim", "num_kv_heads"),
    [(3, None, None), (4, 5, None), (4, 5, 2), (6, 2, 1), (1, 7, None)],
)
def test_forward_equals_head_by_head_math(num_heads, head_dim, num_kv_heads):
    m = _module(num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads)
    xq, xkv = _x(), _x(LK, seed=2)
    expected = _manual_attention(m, xq, xkv)
    for need_weights in (True, False):
        out, _ = m(xq, xkv, xkv, need_weights=need_weights)
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_trace_contributions_sum_to_output():
    m = _module(num_heads=4, head_dim=5, num_kv_heads=2)
    xq, xkv = _x(), _x(LK, seed=2)
    t = m.trace(xq, xkv)
    out, weights = m(xq, xkv, xkv, average_attn_weights=False)
    assert t.q.shape == (B, 4, LQ, 5) and t.k.shape == (B, 2, LK, 5) and t.v.shape == (B, 2, LK, 5)
    assert t.scores.shape == t.weights.shape == (B, 4, LQ, LK)
    assert t.head_outputs.shape == (B, 4, LQ, 5) and t.contributions.shape == (B, 4, LQ, E)
    torch.testing.assert_close(t.contributions.sum(1) + m.out_proj.bias, out)
    assert torch.equal(t.output, out)  # bit for bit: the same computation as forward
    torch.testing.assert_close(t.weights, weights)
    torch.testing.assert_close(t.weights, torch.softmax(t.scores, -1))
    assert not t.detach().output.requires_grad


def test_trace_follows_sequence_first_layout():
    m = _module()
    m.batch_first = False
    x = _x()
    t = m.trace(x.transpose(0, 1))
    out, _ = m(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1))
    torch.testing.assert_close(t.output, out.transpose(0, 1))  # the trace is batch first


def test_head_mask_removes_exactly_one_heads_contribution():
    m = _module(num_heads=4, head_dim=5)
    x = _x()
    full = m.trace(x)
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=F64)
    for need_weights in (True, False):
        out, _ = m(x, x, x, need_weights=need_weights, head_mask=mask)
        torch.testing.assert_close(out, full.output - full.contributions[:, 1])
    per_example = torch.tensor([[1.0, 1.0, 0.5, 1.0], [0.0, 1.0, 1.0, 1.0]], dtype=F64)
    out, _ = m(x, x, x, head_mask=per_example)
    expected = full.output - 0.5 * full.contributions[:, 2]
    expected[1] = full.output[1] - full.contributions[1, 0]
    expected[0] = full.output[0] - 0.5 * full.contributions[0, 2]
    torch.testing.assert_close(out, expected)


def test_gqa_equals_full_heads_with_repeated_kv_weights():
    """An outside reference: torch's module with each K/V head's weights copied to its group."""
    gqa = _module(num_heads=6, num_kv_heads=2, embed_dim=12)
    w_q, w_k, w_v = gqa.projection_weights()
    b_q, b_k, b_v = gqa.projection_biases()
    d, group = gqa.head_dim, 3

    def repeat(t):
        return (
            t.view(2, d, *t.shape[1:]).repeat_interleave(group, dim=0).reshape(6 * d, *t.shape[1:])
        )

    full = torch.nn.MultiheadAttention(12, 6, batch_first=True, dtype=F64)
    with torch.no_grad():
        full.in_proj_weight.copy_(torch.cat([w_q, repeat(w_k), repeat(w_v)]))
        full.in_proj_bias.copy_(torch.cat([b_q, repeat(b_k), repeat(b_v)]))
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = _x()
    expected, expected_w = full(x, x, x, average_attn_weights=False)
    got, got_w = gqa(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_w, expected_w)
    fast, _ = gqa(x, x, x, need_weights=False)
    torch.testing.assert_close(fast, expected)


@pytest.mark.parametrize("num_heads", [1, 2, 4, 6, 12])
def test_with_num_heads_shares_parameters_and_matches_torch(num_heads):
    m = _module(num_heads=3)
    view = m.with_num_heads(num_heads)
    assert view.in_proj_weight is m.in_proj_weight and view.out_proj is m.out_proj
    assert view.head_dim * num_heads == 12
    theirs = torch.nn.MultiheadAttention(12, num_heads, batch_first=True, dtype=F64)
    theirs.load_state_dict(m.state_dict())
    x = _x()
    torch.testing.assert_close(view(x, x, x)[0], theirs(x, x, x)[0])
    with torch.no_grad():
        m.in_proj_weight.mul_(2.0)  # shared: the view sees the change
    theirs.load_state_dict(m.state_dict())
    torch.testing.assert_close(view(x, x, x)[0], theirs(x, x, x)[0])


def test_with_num_heads_rejects_a_head_count_that_does_not_divide():
    m = _module(num_heads=3)
    with pytest.raises(ValueError, match="embed_dim=12 is not divisible by num_heads=5"):
        m.with_num_heads(5)
    gqa = _module(num_heads=4, num_kv_heads=2)
    with pytest.raises(ValueError, match="num_kv_heads"):
        gqa.with_num_heads(1)
    assert gqa.with_num_heads(2, num_kv_heads=1).head_dim == 6


def test_fast_and_explicit_paths_agree_in_gradients():
    m = _module(num_heads=4, head_dim=5, num_kv_heads=2)
    x = _x().requires_grad_()
    kpm = torch.zeros(B, LQ, dtype=torch.bool)
    kpm[1, 2:] = True
    grads = []
    for need_weights in (True, False):
        out, _ = m(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
        grads.append(torch.autograd.grad(out.square().sum(), [x, *m.parameters()]))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_give_zeros_where_torch_gives_nan(need_weights):
    m = _module()
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=F64)
    theirs.load_state_dict(m.state_dict())
    x = _x().requires_grad_()
    kpm = torch.zeros(B, LQ, dtype=torch.bool)
    kpm[0] = True  # every key of batch item 0 is padding
    out, weights = m(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
    torch.testing.assert_close(out[0], m.out_proj.bias.expand(LQ, E))
    assert not out.isnan().any()
    if need_weights:
        assert (weights[0] == 0).all()
    out.sum().backward()
    assert not x.grad.isnan().any()
    torch_out, _ = theirs(x, x, x, key_padding_mask=kpm, need_weights=True)
    assert torch_out[0].isnan().all()  # the documented difference
    torch.testing.assert_close(out[1], torch_out[1])


def test_dropout_acts_only_in_training():
    m = MultiHeadAttention(E, H, dropout=0.5, batch_first=True, dtype=F64)
    x = _x()
    m.eval()
    torch.testing.assert_close(m(x, x, x)[0], m(x, x, x)[0])
    m.train()
    torch.manual_seed(0)
    a = m(x, x, x, need_weights=False)[0]
    torch.manual_seed(1)
    b = m(x, x, x, need_weights=False)[0]
    assert not torch.allclose(a, b)


def test_float32_and_unbatched_input():
    m = MultiHeadAttention(E, H)
    x = torch.randn(LQ, E)
    out, w = m(x, x, x, average_attn_weights=False)
    assert out.shape == (LQ, E) and out.dtype == torch.float32 and w.shape == (H, LQ, LQ)
    torch.testing.assert_close(m(x, x, x, need_weights=False)[0], out, rtol=1e-5, atol=1e-6)


def test_shared_view_shares_everything_but_what_it_replaces():
    from torch import nn

    from headlab.attention.views import shared_view

    outer = nn.Sequential(nn.Linear(3, 5), nn.ReLU())
    outer.register_buffer("scale", torch.tensor(2.5))
    outer.note = "kept"
    outer.eval()
    replacement = nn.Linear(3, 5)
    view = shared_view(outer, **{"0": replacement})
    assert type(view) is nn.Sequential and not view.training and view.note == "kept"
    assert view[0] is replacement and outer[0] is not replacement  # the original is unchanged
    assert view[1] is outer[1] and view.scale is outer.scale

"""Talking heads: identity mixing is plain multi-head attention; mixing couples the heads."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headlab.analysis.coupling import gradient_coupling
from headlab.attention import MultiHeadAttention
from headlab.attention.talking_heads import TalkingHeadsAttention


def _pair(embed=12, heads=3, seed=0, batch_first=True):
    torch.manual_seed(seed)
    plain = MultiHeadAttention(embed, heads, batch_first=batch_first, dtype=torch.float64)
    with torch.no_grad():  # unusual non-zero biases, so zeros cannot hide a bug
        plain.in_proj_bias.uniform_(-0.5, 0.5)
        plain.out_proj.bias.uniform_(-0.5, 0.5)
    return plain, TalkingHeadsAttention.from_plain(plain)


@given(
    seed=st.integers(0, 2**16),
    causal=st.booleans(),
    batch_first=st.booleans(),
    pos=st.sampled_from([5, 7]),
)
def test_identity_mixing_is_plain_attention(seed, causal, batch_first, pos):
    plain, talking = _pair(seed=seed, batch_first=batch_first)
    x = torch.randn(2, pos, 12, dtype=torch.float64)
    x = x if batch_first else x.transpose(0, 1)
    want, w_want = plain(x, x, x, is_causal=causal, average_attn_weights=False)
    got, w_got = talking(x, x, x, is_causal=causal, average_attn_weights=False)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w_got, w_want, rtol=1e-12, atol=1e-12)


def test_identity_mixing_trace_and_padding():
    plain, talking = _pair(embed=15, heads=5, seed=4)
    x = torch.randn(3, 7, 15, dtype=torch.float64)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    a = plain.trace(x, key_padding_mask=pad)
    b = talking.trace(x, key_padding_mask=pad)
    for name in ("q", "k", "v", "weights", "head_outputs", "contributions", "output"):
        torch.testing.assert_close(getattr(b, name), getattr(a, name), rtol=1e-12, atol=1e-12)


def test_mixing_by_hand():
    """One batch, independent computation of L' -> softmax -> W -> O with numpy."""
    _, talking = _pair(embed=6, heads=2, seed=1)
    with torch.no_grad():
        talking.pre_mix.copy_(torch.tensor([[0.7, -0.4], [1.3, 0.2]]))
        talking.post_mix.copy_(torch.tensor([[0.5, 0.9], [0.6, -0.3]]))
    x = torch.randn(1, 5, 6, dtype=torch.float64)
    trace = talking.trace(x)
    q, k, v = (t[0].detach().numpy() for t in (trace.q, trace.k, trace.v))
    logits = np.einsum("hqd,hkd->hqk", q, k) / np.sqrt(3)
    mixed = np.einsum("hqk,hj->jqk", logits, talking.pre_mix.detach().numpy())
    p = np.exp(mixed - mixed.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    w = np.einsum("hqk,hj->jqk", p, talking.post_mix.detach().numpy())
    np.testing.assert_allclose(trace.head_outputs[0].detach().numpy(), w @ v, rtol=1e-12)


def test_coupling_block_diagonal_at_identity_and_not_when_mixed():
    _, talking = _pair(embed=15, heads=5, seed=2)
    x = torch.randn(2, 7, 15, dtype=torch.float64)
    off = ~np.eye(5, dtype=bool)
    assert (gradient_coupling(talking, x)[off] == 0).all()
    with torch.no_grad():
        talking.pre_mix.add_(0.3 * torch.randn(5, 5, dtype=torch.float64))
        talking.post_mix.add_(0.3 * torch.randn(5, 5, dtype=torch.float64))
    mixed = gradient_coupling(talking, x)
    assert mixed[off].min() > 1e-3 * np.diag(mixed).mean()


def test_gradients_float64_against_finite_differences():
    _, talking = _pair(embed=6, heads=3, seed=3)
    with torch.no_grad():
        talking.pre_mix.add_(0.2)
        talking.post_mix.sub_(0.1)
    x = torch.randn(1, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: talking(t, t, t)[0], (x,))


@pytest.mark.parametrize(
    ("option", "value"), [("add_bias_kv", True), ("num_kv_heads", 1), ("kdim", 5)]
)
def test_unsupported_options(option, value):
    with pytest.raises(ValueError, match=option):
        TalkingHeadsAttention(6, 3, **{option: value})


def test_unbatched_input_and_head_mask_match_plain():
    plain, talking = _pair(embed=15, heads=5, seed=6)
    x = torch.randn(7, 15, dtype=torch.float64)  # (pos, E), no batch
    mask = torch.tensor([1.0, 0.0, 0.5, 1.0, 2.0], dtype=torch.float64)
    want, w_want = plain(x, x, x, head_mask=mask, average_attn_weights=False)
    got, w_got = talking(x, x, x, head_mask=mask, average_attn_weights=False)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w_got, w_want, rtol=1e-12, atol=1e-12)
    assert talking._qkv_same_embed_dim is False  # torch's fused layer kernel must not replace it

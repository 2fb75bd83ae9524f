"""The hand-built references' one attention function against torch's own
``scaled_dot_product_attention`` (float64) and its properties, for any sizes hypothesis draws."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from headlab.models.handbuilt import attention

sizes = st.tuples(
    st.integers(1, 3), st.integers(1, 4), st.integers(1, 7), st.integers(1, 9), st.integers(1, 6)
)  # batch, head, q_pos, k_pos, d_head


def drawn(batch, heads, q_pos, k_pos, d, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(batch, heads, n, d, generator=gen, dtype=torch.float64) * 2 + 0.3
        for n in (q_pos, k_pos, k_pos)
    )
    allowed = torch.rand(batch, 1, q_pos, k_pos, generator=gen) < 0.7
    allowed[..., 0] = True  # every query row allows one key
    return q, k, v, allowed


@given(sizes, st.integers(0, 2**16))
def test_attention_equals_torch_and_keeps_its_properties(size, seed):
    q, k, v, allowed = drawn(*size, seed)
    out, weights = attention(q, k, v, allowed)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=q.dtype))
    assert (weights.masked_select(~allowed.expand_as(weights)) == 0).all()
    order = torch.randperm(k.shape[2], generator=torch.Generator().manual_seed(seed))
    permuted, _ = attention(q, k[:, :, order], v[:, :, order], allowed[..., order])
    torch.testing.assert_close(permuted, out, rtol=0, atol=1e-12)


def test_one_case_by_hand():
    """One query, two keys with scaled scores 0 and ln 3 (q.k = ln 3 * sqrt(2), over
    sqrt(d_head) = sqrt(2)): weights 1/4 and 3/4, output 1/4 v_0 + 3/4 v_1."""
    q = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[0.0, 0.0], [math.log(3) * math.sqrt(2), 5.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[4.0, 0.0], [0.0, 8.0]]]], dtype=torch.float64)
    out, weights = attention(q, k, v, torch.ones(1, 1, 1, 2, dtype=torch.bool))
    torch.testing.assert_close(weights[0, 0, 0], torch.tensor([0.25, 0.75], dtype=torch.float64))
    torch.testing.assert_close(out[0, 0, 0], torch.tensor([1.0, 6.0], dtype=torch.float64))

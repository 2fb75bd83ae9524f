"""The packed self-attention projection (one matmul on in_proj_weight, split by head sizes) equals
three separate projections, with GQA and a free head_dim, where the split sizes differ."""

from __future__ import annotations

import pytest
import torch

from headlab import MultiHeadAttention


@pytest.mark.parametrize(
    ("num_heads", "head_dim", "num_kv_heads"), [(3, 5, None), (6, 5, 2), (4, 3, 1), (4, None, 4)]
)
@pytest.mark.parametrize("need_weights", [True, False])
def test_packed_projection_equals_separate(num_heads, head_dim, num_kv_heads, need_weights) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(
        12,
        num_heads,
        batch_first=True,
        dtype=torch.float64,
        head_dim=head_dim,
        num_kv_heads=num_kv_heads,
    )
    with torch.no_grad():
        mha.in_proj_bias.normal_()
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    packed, _ = mha(x, x, x, need_weights=need_weights)  # query is key is value: packed path
    separate, _ = mha(x, x.clone(), x.clone(), need_weights=need_weights)
    torch.testing.assert_close(packed, separate, rtol=1e-12, atol=1e-12)

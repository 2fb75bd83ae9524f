"""Gradients a block of query rows at a time equal autograd over the whole output (float64)."""

from __future__ import annotations

import pytest
import torch

import headlab.analysis.row_gradients as row_module
from headlab.analysis.row_gradients import block_rows, row_gradients
from headlab.attention.module import MultiHeadAttention


def _whole(module, x, masks, upstream):
    """The reference: one autograd call over the whole output (every row at once)."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    out = module.trace(x, **masks).output
    grads = torch.autograd.grad(out, [p for _, p in named], upstream, allow_unused=True)
    pairs = zip(named, grads, strict=True)
    return {n: torch.zeros_like(p) if g is None else g for (n, p), g in pairs}


@pytest.mark.parametrize("masking", ["none", "causal", "attn_mask", "padding"])
def test_blocks_of_rows_sum_to_the_whole_gradient(masking, monkeypatch):
    torch.manual_seed(7)
    batch, q_pos, embed, heads = 2, 13, 12, 3
    module = MultiHeadAttention(embed, heads, batch_first=True).double()
    x = torch.randn(batch, q_pos, embed, dtype=torch.float64)
    masks = {"key_padding_mask": None, "attn_mask": None, "is_causal": False}
    if masking == "causal":
        masks["is_causal"] = True
    elif masking == "attn_mask":
        masks["attn_mask"] = torch.rand(q_pos, q_pos) < 0.3
        masks["attn_mask"].fill_diagonal_(False)
    elif masking == "padding":
        masks["key_padding_mask"] = torch.zeros(batch, q_pos, dtype=torch.bool)
        masks["key_padding_mask"][1, -4:] = True
    upstream = torch.randn(batch, q_pos, embed, dtype=torch.float64)
    want = _whole(module, x, masks, upstream)
    # 5 rows a block: blocks of 5, 5 and 3 rows
    monkeypatch.setattr(row_module, "BLOCK_BYTES", 4 * batch * heads * q_pos * 5)
    assert block_rows(batch, heads, q_pos, q_pos) == 5
    got = row_gradients(module, (x, None, None), masks, upstream)
    assert set(got) == set(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-12, atol=1e-12)


def test_one_block_is_the_whole_computation_bit_for_bit():
    torch.manual_seed(3)
    module = MultiHeadAttention(10, 2, batch_first=True)
    x = torch.randn(1, 7, 10)
    masks = {"key_padding_mask": None, "attn_mask": None, "is_causal": True}
    upstream = torch.randn(1, 7, 10)
    got = row_gradients(module, (x, None, None), masks, upstream)
    want = _whole(module, x, masks, upstream)
    assert all(torch.equal(got[n], want[n]) for n in want)

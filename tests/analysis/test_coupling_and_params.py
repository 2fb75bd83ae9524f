"""Gradient coupling between head blocks, per-head gradient norms, parameter counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlab import MultiHeadAttention
from headlab.analysis import (
    gradient_coupling,
    head_gradient_norms,
    parameter_count,
    parameter_table,
)

E, H, B, L = 15, 3, 2, 7


def _module(num_heads=H, **kwargs):
    torch.manual_seed(1)
    m = MultiHeadAttention(E, num_heads, batch_first=True, dtype=torch.float64, **kwargs)
    with torch.no_grad():
        m.in_proj_bias.uniform_(-0.3, 0.3)
    return m


X = torch.randn(B, L, E, dtype=torch.float64, generator=torch.Generator().manual_seed(2))


def test_coupling_is_block_diagonal_with_heads_and_full_with_one_head():
    m = _module()
    multi = gradient_coupling(m, X)
    single = gradient_coupling(m.with_num_heads(1), X, blocks=H)
    off = ~np.eye(H, dtype=bool)
    assert multi.shape == single.shape == (H, H)
    assert (multi[off] == 0).all() and (np.diag(multi) > 0).all()
    assert (single[off] > 1e-3 * single.max()).all()


def test_coupling_matches_a_direct_autograd_measurement():
    m = _module().with_num_heads(1)
    coupling = gradient_coupling(m, X, blocks=H, seed=4)
    # independent check of one entry: change only block 2's upstream, look at block 0's rows
    gen = torch.Generator().manual_seed(4)
    t = m.trace(X)
    concat = t.head_outputs.transpose(1, 2).reshape(B, L, E)
    base = torch.randn(concat.shape, generator=gen, dtype=concat.dtype)
    delta = torch.randn(concat.shape, generator=gen, dtype=concat.dtype)
    changed = base.clone()
    changed[..., 10:15] += delta[..., 10:15]
    (g0,) = torch.autograd.grad(concat, m.in_proj_weight, base, retain_graph=True)
    (g1,) = torch.autograd.grad(concat, m.in_proj_weight, changed)
    rows0 = np.r_[0:5, 15:20, 30:35]  # block 0 of W_Q, W_K, W_V
    expected = (g1 - g0)[rows0].norm().item()
    assert coupling[0, 2] == pytest.approx(expected, rel=1e-9)


def test_coupling_rejects_blocks_that_do_not_divide():
    with pytest.raises(ValueError, match="blocks must divide the head output width 15, got 4"):
        gradient_coupling(_module(), X, blocks=4)


def test_head_gradient_norms_match_autograd_blocks():
    m = _module()
    norms = head_gradient_norms(m, X, seed=3)
    gen = torch.Generator().manual_seed(3)
    out = m.trace(X).output
    upstream = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    g_in, g_out = torch.autograd.grad(out, [m.in_proj_weight, m.out_proj.weight], upstream)
    for i in range(H):
        assert norms.w_q[i] == pytest.approx(g_in[5 * i : 5 * i + 5].norm().item())
        assert norms.w_o[i] == pytest.approx(g_out[:, 5 * i : 5 * i + 5].norm().item())


@pytest.mark.parametrize("d_model", [12, 60])
def test_parameter_count_does_not_depend_on_heads_and_equals_torch(d_model):
    heads = [h for h in (1, 2, 3, 4, 6) if d_model % h == 0]
    rows = parameter_table(d_model, heads)
    torch_count = sum(p.numel() for p in torch.nn.MultiheadAttention(d_model, 1).parameters())
    assert {r.total for r in rows} == {torch_count} == {4 * d_model**2 + 4 * d_model}


def test_gqa_saves_exactly_the_shared_kv_rows():
    rows = parameter_table(24, [4], [1, 2, 4])
    by_g = {r.num_kv_heads: r for r in rows}
    d = 6
    for g in (1, 2):
        assert by_g[g].saved_vs_full_mha == 2 * (4 - g) * d * (24 + 1)
    assert by_g[4].saved_vs_full_mha == 0
    assert by_g[1].total == parameter_count(MultiHeadAttention(24, 4, num_kv_heads=1))


def test_shared_parameters_count_once():
    m = MultiHeadAttention(12, 3)
    pair = torch.nn.ModuleList([m, m.with_num_heads(1)])
    assert parameter_count(pair) == parameter_count(m)


def test_parameter_table_names_its_arguments():
    from headlab.analysis.params import parameter_table

    with pytest.raises(ValueError, match=r"^d_model=10 is not divisible by heads=3$"):
        parameter_table(10, [2, 3])


def test_coupling_summary_is_zero_off_the_diagonal_with_heads_and_coupled_as_one_head() -> None:
    from headlab.analysis import coupling_summary

    summary = coupling_summary(d_model=12, num_heads=3, seq_len=5, seed=2)
    heads, one = summary.matrices
    assert heads.matrix.shape == one.matrix.shape == (3, 3)
    assert heads.off_diagonal_max == 0.0
    assert one.off_diagonal_max > 1e-6
    assert summary.to_dict()["matrices"][1]["title"] == "1 head, same weights"

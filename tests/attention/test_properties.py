"""Properties of the module's attention weights and outputs, over generated inputs."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from headlab import MultiHeadAttention

F64 = torch.float64


@st.composite
def cases(draw):
    heads = draw(st.sampled_from([1, 2, 3]))
    kv_heads = draw(st.sampled_from([h for h in (1, 2, 3) if heads % h == 0]))
    return {
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": draw(st.sampled_from([2, 5])),
        "q_len": draw(st.integers(1, 6)),
        "k_len": draw(st.integers(1, 7)),
        "seed": draw(st.integers(0, 10_000)),
    }


def _setup(case):
    gen = torch.Generator().manual_seed(case["seed"])
    torch.manual_seed(case["seed"])
    m = MultiHeadAttention(
        11,
        case["heads"],
        head_dim=case["head_dim"],
        num_kv_heads=case["kv_heads"],
        batch_first=True,
        dtype=F64,
    )
    q = torch.randn(2, case["q_len"], 11, dtype=F64, generator=gen)
    k = torch.randn(2, case["k_len"], 11, dtype=F64, generator=gen)
    v = torch.randn(2, case["k_len"], 11, dtype=F64, generator=gen)
    kpm = torch.rand(2, case["k_len"], generator=gen) < 0.5
    return m, q, k, v, kpm


@given(cases())
def test_rows_sum_to_one_and_masked_keys_get_zero(case):
    m, q, k, v, kpm = _setup(case)
    t = m.trace(q, k, v, key_padding_mask=kpm)
    row_sums = t.weights.sum(-1)  # (batch, head, q_pos)
    fully_masked = kpm.all(-1)  # (batch,)
    expected = (~fully_masked).to(F64).view(2, 1, 1).expand_as(row_sums)
    torch.testing.assert_close(row_sums, expected)
    assert (t.weights.masked_select(kpm.view(2, 1, 1, -1).expand_as(t.weights)) == 0).all()
    assert not t.output.isnan().any()


@given(cases())
def test_permuting_keys_with_values_changes_nothing(case):
    m, q, k, v, kpm = _setup(case)
    perm = torch.randperm(case["k_len"], generator=torch.Generator().manual_seed(case["seed"]))
    out, _ = m(q, k, v, key_padding_mask=kpm, need_weights=False)
    permuted, _ = m(q, k[:, perm], v[:, perm], key_padding_mask=kpm[:, perm], need_weights=False)
    torch.testing.assert_close(permuted, out)


@given(cases())
def test_fast_path_equals_explicit_path(case):
    m, q, k, v, kpm = _setup(case)
    fast, _ = m(q, k, v, key_padding_mask=kpm, need_weights=False)
    explicit, _ = m(q, k, v, key_padding_mask=kpm, need_weights=True)
    torch.testing.assert_close(fast, explicit)

"""Interventions and ablations against hand-composed references from the trace.

A head's contribution to the output is ``contributions[:, h]`` (head output times its block of
W_O), so replacing head h's output by z changes the output by ``(z - head_out_h) W_O_h^T``: every
expectation below is composed from traces that way, not from the intervention code.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from headlab import MultiHeadAttention
from headlab.attention.functional import expand_kv
from headlab.attention.interventions import (
    SITES,
    ablate,
    intervene,
    mean_head_output,
    patch,
    query_heads,
    record,
)
from headlab.attention.rotary import apply_rotary

F64 = torch.float64
B, L, E, H, G = 3, 5, 12, 4, 2  # batch, positions, width, query heads, K/V heads; D = 3


def _module(**kwargs) -> MultiHeadAttention:
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, num_kv_heads=G, batch_first=True, dtype=F64, **kwargs)
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-0.6, 0.8)
    return m.eval()


def _x(seed: int, batch: int = B) -> torch.Tensor:
    return torch.randn(batch, L, E, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _out(m, x, **kwargs):
    return m(x, x, x, need_weights=False, **kwargs)[0]


def _head_term(m: MultiHeadAttention, z: torch.Tensor, h: int) -> torch.Tensor:
    """z (batch, q_pos, d_head) through head h's block of W_O: (batch, q_pos, d_model)."""
    d = m.head_dim
    return z @ m.out_proj.weight[:, h * d : (h + 1) * d].T


@pytest.mark.parametrize("rotary", [None, 100.0])
def test_record_sees_the_traced_intermediates_during_a_fused_forward(rotary):
    m = _module(head_dim=4, rotary_base=rotary) if rotary else _module()
    x = _x(1)
    expected = m.trace(x)
    with record(m) as rec:
        out = _out(m, x)  # need_weights=False: the sites force the explicit path
    for site, name in zip(SITES, ("q", "k", "v", "scores", "weights", "head_outputs"), strict=True):
        torch.testing.assert_close(rec[site], getattr(expected, name))
    torch.testing.assert_close(out, expected.output)
    assert not m.sites
    if rotary:  # q as the site sees it is rotated: by hand, the projection then the rotation
        w_q, _, _ = m.projection_weights()
        b_q, _, _ = m.projection_biases()
        q = (x @ w_q.T + b_q).view(B, L, H, -1).transpose(1, 2)  # (batch, head, q_pos, d_head)
        torch.testing.assert_close(rec["q"], apply_rotary(q, rotary))
        assert not torch.allclose(rec["q"], q)


def test_a_reading_intervention_changes_nothing_and_is_removed_on_error():
    m, x = _module(), _x(1)
    seen = []
    with intervene(m, "weights", lambda w: seen.append(w.shape)):
        torch.testing.assert_close(_out(m, x), _out(m.with_num_heads(H, G), x))
    assert seen == [(B, H, L, L)]
    with pytest.raises(RuntimeError, match="boom"), intervene(m, "q", lambda q: q * 2):
        raise RuntimeError("boom")
    assert not m.sites


@pytest.mark.parametrize("heads", [[1], [0, 3]])
def test_zero_ablation_equals_head_mask_zero(heads):
    m, x = _module(), _x(1)
    mask = torch.ones(H, dtype=F64)
    mask[heads] = 0.0
    with ablate(m, heads, mode="zero"):
        got = _out(m, x)
    torch.testing.assert_close(got, _out(m, x, head_mask=mask))


def test_ablating_a_kv_group_ablates_each_of_its_query_heads():
    m, x = _module(), _x(1)
    assert query_heads(m, kv_groups=[1]) == [2, 3]
    t = m.trace(x)
    with ablate(m, kv_groups=[1], mode="zero"):
        got = _out(m, x)
    torch.testing.assert_close(got, t.output - t.contributions[:, 2] - t.contributions[:, 3])


def test_mean_ablation_puts_the_reference_mean_in_place_of_the_head():
    m, x, reference = _module(), _x(1), _x(2, batch=4)
    t, r = m.trace(x), m.trace(reference)
    mean = r.head_outputs[:, 2].mean(dim=(0, 1))  # (d_head,), over batch and positions
    expected = t.output - t.contributions[:, 2] + _head_term(m, mean.expand(B, L, -1), 2)
    for ref in (r.head_outputs, mean_head_output(r.head_outputs)):
        with ablate(m, [2], mode="mean", reference=ref):
            torch.testing.assert_close(_out(m, x), expected)


def test_mean_over_real_positions_only():
    outputs = torch.randn(2, H, L, 3, dtype=F64)
    positions = torch.ones(2, L, dtype=torch.bool)
    positions[1, 3:] = False
    expected = torch.cat([outputs[0], outputs[1, :, :3]], dim=1).mean(dim=1)  # (head, d_head)
    torch.testing.assert_close(mean_head_output(outputs, positions), expected)


def test_resample_equals_running_that_head_on_the_other_input():
    m, x, other = _module(), _x(1), _x(3)
    t, o = m.trace(x), m.trace(other)
    with ablate(m, [1], mode="resample", reference=o.head_outputs):
        got = _out(m, x)
    torch.testing.assert_close(got, t.output - t.contributions[:, 1] + o.contributions[:, 1])
    with ablate(m, [1], mode="resample"):  # no reference: the previous example of the batch
        got = _out(m, x)
    rolled = t.contributions[:, 1].roll(1, dims=0)
    torch.testing.assert_close(got, t.output - t.contributions[:, 1] + rolled)


def test_patching_weights_from_another_input():
    """Head h's weights from input B applied to input A's values: P_B V_A, by hand."""
    m, x, other = _module(), _x(1), _x(3)
    t, o = m.trace(x), m.trace(other)
    with patch(m, "weights", [3], o.weights):
        got, weights = m(x, x, x, average_attn_weights=False)
    v = expand_kv(t.v, H // G)
    z = o.weights[:, 3] @ v[:, 3]  # (batch, q_pos, d_head)
    expected = t.output - t.contributions[:, 3] + _head_term(m, z, 3)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(weights[:, 3], o.weights[:, 3])
    torch.testing.assert_close(weights[:, :3], t.weights[:, :3])


def test_patching_a_kv_head_changes_its_whole_group():
    m, x, other = _module(), _x(1), _x(3)
    t, o = m.trace(x), m.trace(other)
    with record(m, ["head_outputs"]) as rec, patch(m, "v", [0], o.v):
        _out(m, x)
    v = torch.cat([o.v[:, :1], t.v[:, 1:]], dim=1)
    expected = t.weights @ expand_kv(v, H // G)
    torch.testing.assert_close(rec["head_outputs"], expected)
    assert not torch.allclose(rec["head_outputs"][:, :2], t.head_outputs[:, :2])
    torch.testing.assert_close(rec["head_outputs"][:, 2:], t.head_outputs[:, 2:])


def test_zeroing_an_output_slice_after_w_o_is_not_ablating_the_head():
    """The mis-sited ablation: output columns h*D:(h+1)*D mix every head through W_O."""
    m, x = _module(), _x(1)
    t = m.trace(x)
    h, d = 1, m.head_dim
    missited = t.output.clone()
    missited[..., h * d : (h + 1) * d] = 0.0
    with ablate(m, [h]):
        sited = _out(m, x)
    torch.testing.assert_close(sited, t.output - t.contributions[:, h])
    assert (missited - sited).abs().max() > 0.1


def test_interventions_keep_torchs_fused_kernel_away():
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(E, H, 23, dropout=0.0, batch_first=True).eval()
    ours = MultiHeadAttention(E, H, batch_first=True)
    ours.load_state_dict(layer.self_attn.state_dict())
    layer.self_attn = ours
    x = torch.randn(B, L, E)
    assert ours._qkv_same_embed_dim
    with torch.no_grad(), ablate(ours, [0, 1, 2, 3]):
        assert not ours._qkv_same_embed_dim
        got = layer(x)
    bias_only = ours.out_proj.bias.expand(B, L, E)  # every head ablated: attention gives b_O
    with torch.no_grad():
        h = layer.norm1(x + bias_only)
        expected = layer.norm2(h + layer.linear2(layer.activation(layer.linear1(h))))
    torch.testing.assert_close(got, expected)
    assert ours._qkv_same_embed_dim


def test_bad_requests_name_what_is_wrong():
    m, x = _module(), _x(1)
    with pytest.raises(ValueError, match="site must be one of"), intervene(m, "logits", print):
        pass
    with pytest.raises(ValueError, match="head 4 out of range"), ablate(m, [4]):
        pass
    with pytest.raises(ValueError, match="K/V group 2 out of range"), ablate(m, kv_groups=[2]):
        pass
    with pytest.raises(ValueError, match="needs reference"), ablate(m, [0], mode="mean"):
        pass
    wrong = torch.zeros(1, H, L, 3, dtype=F64)
    with (
        pytest.raises(ValueError, match="must have the shape of the site"),
        patch(m, "head_outputs", [0], wrong),
    ):
        _out(m, x)
    assert not m.sites

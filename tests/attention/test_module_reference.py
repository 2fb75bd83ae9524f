"""The module's entry points against a hand-written float64 reference, under hypothesis.

``MultiHeadAttention.forward`` (need_weights False, averaged, per head; with autograd, without,
and the blocked loop forced), ``trace``, ``HeadGroupView`` and ``TalkingHeadsAttention`` with
identity mixing, each against ``reference`` below: the projections written out from the
parameters, rotary positions applied pair by pair, the ``add_bias_kv`` / ``add_zero_attn`` key
columns appended, every key's visibility decided by its rule (padding, causal, boolean or float
masks), a softmax of exp and a sum, the head mask, W_O per head. Hypothesis draws the sizes
(distinct, grouped K/V heads, a free head_dim), self- or cross-attention, the layout (batch
first, sequence first, unbatched) and the masks.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import headlab.attention.chunked as chunked_path
import headlab.attention.kernel as kernel
from headlab import MultiHeadAttention
from headlab.attention.head_groups import HeadGroupView
from headlab.attention.talking_heads import TalkingHeadsAttention

F64 = torch.float64
FAST = settings(max_examples=80)


def _rotate(x: torch.Tensor, base: float) -> torch.Tensor:
    """x (batch, head, pos, d) rotated pair by pair (i, i + d/2) by angle p * base^(-2i/d)."""
    out = x.clone()
    d = x.shape[-1]
    for p in range(x.shape[2]):
        for i in range(d // 2):
            angle = p * base ** (-2 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[:, :, p, i], x[:, :, p, i + d // 2]
            out[:, :, p, i] = a * c - b * s
            out[:, :, p, i + d // 2] = b * c + a * s
    return out


def reference(m: MultiHeadAttention, xq, xk, xv, *, padding, attn, is_causal, head_mask, view):
    """Every intermediate of ``m`` on batch-first inputs, float64, by definition; ``view``: the
    heads merged into that many groups (scores summed / sqrt(group size), shared weights)."""
    heads, groups, d = m.num_heads, m.num_kv_heads, m.head_dim
    batch, q_len, k_len = xq.shape[0], xq.shape[1], xk.shape[1]
    if m.in_proj_weight is not None:
        w_q, w_k, w_v = m.in_proj_weight.detach().split([heads * d, groups * d, groups * d])
    else:
        w_q, w_k, w_v = (t.detach() for t in (m.q_proj_weight, m.k_proj_weight, m.v_proj_weight))
    b = m.in_proj_bias
    b = torch.zeros((heads + 2 * groups) * d, dtype=F64) if b is None else b.detach()
    q = xq @ w_q.T + b[: heads * d]
    k = xk @ w_k.T + b[heads * d : (heads + groups) * d]
    v = xv @ w_v.T + b[(heads + groups) * d :]
    extra = 0
    if m.bias_k is not None:
        k = torch.cat([k, m.bias_k.detach().expand(batch, 1, -1)], dim=1)
        v = torch.cat([v, m.bias_v.detach().expand(batch, 1, -1)], dim=1)
        extra += 1
    if m.add_zero_attn:
        k = torch.cat([k, torch.zeros(batch, 1, groups * d, dtype=F64)], dim=1)
        v = torch.cat([v, torch.zeros(batch, 1, groups * d, dtype=F64)], dim=1)
        extra += 1
    keys = k_len + extra
    q = q.view(batch, q_len, heads, d).transpose(1, 2)
    k = k.view(batch, keys, groups, d).transpose(1, 2)
    v = v.view(batch, keys, groups, d).transpose(1, 2)
    if m.rotary_base is not None:
        q, k = _rotate(q, m.rotary_base), _rotate(k, m.rotary_base)
    shown = view or heads
    size = heads // shown
    causal = m.causal or (is_causal and attn is None)  # with attn_mask, is_causal is a hint
    scores = torch.full((batch, shown, q_len, keys), -math.inf, dtype=F64)
    weights = torch.zeros(batch, shown, q_len, keys, dtype=F64)
    head_out = torch.zeros(batch, heads, q_len, d, dtype=F64)
    for bi in range(batch):
        for h in range(shown):
            members = range(h * size, (h + 1) * size)
            for i in range(q_len):
                row = sum(q[bi, g, i] @ k[bi, g // (heads // groups)].T for g in members)
                row = row / math.sqrt(d) / math.sqrt(size)
                visible = torch.ones(keys, dtype=torch.bool)
                for j in range(k_len):  # the extra columns are always visible
                    if padding is not None and padding.dtype == torch.bool:
                        visible[j] &= not bool(padding[bi, j])
                    elif padding is not None:
                        row[j] += padding[bi, j]
                    if causal and j > i:
                        visible[j] = False
                    if attn is not None:
                        a = attn[i, j] if attn.dim() == 2 else attn[bi * heads + h, i, j]
                        if a.dtype == torch.bool:
                            visible[j] &= not bool(a)
                        else:
                            row[j] += a
                if not visible.any():
                    scores[bi, h, i] = 0.0  # a row that sees no key: zeros everywhere
                    continue
                scores[bi, h, i] = torch.where(visible, row, -math.inf)
                e = torch.where(visible, (row - row[visible].max()).exp(), 0.0)
                weights[bi, h, i] = e / e.sum()
                for g in members:
                    head_out[bi, g, i] = weights[bi, h, i] @ v[bi, g // (heads // groups)]
    if head_mask is not None:
        head_out = head_out * head_mask.view(-1, heads, 1, 1)
    w_o = m.out_proj.weight.detach()
    contributions = torch.stack(
        [head_out[:, h] @ w_o[:, h * d : (h + 1) * d].T for h in range(heads)], dim=1
    )
    output = contributions.sum(1)
    if m.out_proj.bias is not None:
        output = output + m.out_proj.bias.detach()
    return {
        "q": q,
        "k": k,
        "v": v,
        "scores": scores,
        "weights": weights,
        "head_outputs": head_out,
        "contributions": contributions,
        "output": output,
    }


@st.composite
def module_cases(draw, *, talking: bool = False, view: bool = False):
    """(module, (query, key, value) in its layout, batch-first copies, call options)."""
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    heads, groups = draw(
        st.sampled_from([(3, 3), (2, 2)] if talking else [(4, 2), (3, 3), (6, 3), (4, 1), (2, 2)])
    )
    d = draw(st.sampled_from([2, 4]))
    embed = draw(st.sampled_from([7, 10]))  # heads * d != embed: a free head_dim
    cross = not talking and draw(st.booleans())
    simple = talking  # TalkingHeadsAttention refuses GQA, extra keys, kdim/vdim
    torch.manual_seed(seed)
    options = {
        "head_dim": d,
        "num_kv_heads": None if simple else groups,
        "rotary_base": draw(st.sampled_from([None, 10.0, 1000.0])),
        "causal": draw(st.booleans()),
        "bias": draw(st.booleans()),
        "batch_first": draw(st.booleans()),
        "dtype": F64,
    }
    if not simple:
        options |= {"add_bias_kv": draw(st.booleans()), "add_zero_attn": draw(st.booleans())}
    if cross:
        options |= {"kdim": 5, "vdim": 9}
    m = MultiHeadAttention(embed, heads, **options)
    with torch.no_grad():  # non-zero biases, so that a dropped bias fails
        for p in (m.in_proj_bias, m.out_proj.bias):
            if p is not None:
                p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
    batch = draw(st.sampled_from([1, 2]))
    q_len = draw(st.integers(1, 5))
    k_len = draw(st.integers(1, 6)) if cross else q_len
    xq = torch.randn(batch, q_len, embed, generator=g, dtype=F64)
    xk = torch.randn(batch, k_len, m.kdim, generator=g, dtype=F64) if cross else xq
    xv = torch.randn(batch, k_len, m.vdim, generator=g, dtype=F64) if cross else xq
    call = {"is_causal": draw(st.booleans())}
    padding = draw(st.sampled_from([None, "bool", "float"] if not talking else [None, "bool"]))
    if padding == "bool":
        call["key_padding_mask"] = torch.rand(batch, k_len, generator=g) < 0.3
    elif padding == "float":
        call["key_padding_mask"] = torch.randn(batch, k_len, generator=g, dtype=F64)
    attn = None if talking else draw(st.sampled_from([None, "bool", "float", "per head"]))
    if view and attn == "per head":
        attn = "bool"  # a view takes masks shared by all heads
    if attn == "bool":
        call["attn_mask"] = torch.rand(q_len, k_len, generator=g) < 0.3
    elif attn == "float":
        call["attn_mask"] = torch.randn(q_len, k_len, generator=g, dtype=F64)
    elif attn == "per head":
        call["attn_mask"] = torch.rand(batch * heads, q_len, k_len, generator=g) < 0.3
    unbatched = batch == 1 and draw(st.booleans())
    divisors = [n for n in range(1, heads + 1) if heads % n == 0]
    shown = draw(st.sampled_from(divisors)) if view else None
    mask_heads = shown or heads
    head_mask = draw(st.sampled_from([None, "head", "batch"]))
    if head_mask is not None:
        shape = (mask_heads,) if head_mask == "head" or unbatched else (batch, mask_heads)
        call["head_mask"] = torch.randn(shape, generator=g, dtype=F64)
    inputs = []
    for x in (xq, xk, xv):
        if unbatched:
            inputs.append(x[0])
        else:
            inputs.append(x if m.batch_first else x.transpose(0, 1))
    if unbatched and "key_padding_mask" in call:
        call["key_padding_mask"] = call["key_padding_mask"][0]
    if xk is xq:  # self-attention: the same tensor, as a caller passes it
        inputs = [inputs[0]] * 3
    return m, inputs, (xq, xk, xv), call, {"unbatched": unbatched, "view": shown}


def _expected(m, batch_first_inputs, call, info, view_module=None):
    head_mask = call.get("head_mask")
    if head_mask is not None and info["view"] is not None:  # one entry per merged head
        head_mask = head_mask.repeat_interleave(m.num_heads // info["view"], dim=-1)
    padding = call.get("key_padding_mask")
    if padding is not None and info["unbatched"]:
        padding = padding[None]
    return reference(
        m,
        *batch_first_inputs,
        padding=padding,
        attn=call.get("attn_mask"),
        is_causal=call["is_causal"],
        head_mask=head_mask,
        view=info["view"],
    )


def _layout(m, output, info):
    """The reference output (batch, q_pos, d_model) in the module's layout."""
    if info["unbatched"]:
        return output[0]
    return output if m.batch_first else output.transpose(0, 1)


def _tolerance(m):
    # rotary angles are computed in float32 (rotary.py): the reference's float64 angles differ
    rotary = m.rotary_base is not None
    return {"atol": 1e-5, "rtol": 1e-5} if rotary else {"atol": 1e-10, "rtol": 1e-9}


def _check_forward(module, m, inputs, call, info, want, tol):
    out, none = module(*inputs, need_weights=False, **call)
    assert none is None
    torch.testing.assert_close(out, _layout(m, want["output"], info), **tol)
    for average in (True, False):
        out, w = module(*inputs, average_attn_weights=average, **call)
        expected = want["weights"].mean(1) if average else want["weights"]
        if info["unbatched"]:
            expected = expected[0]
        torch.testing.assert_close(out, _layout(m, want["output"], info), **tol)
        torch.testing.assert_close(w, expected, **tol)


@FAST
@given(module_cases(), st.sampled_from(["no grad", "grad", "blocked"]))
def test_forward_and_trace_equal_the_reference(case, mode):
    m, inputs, batch_first, call, info = case
    want = _expected(m, batch_first, call, info)
    tol = _tolerance(m)
    grad = mode == "grad"
    with pytest.MonkeyPatch.context() as mp, torch.set_grad_enabled(grad):
        if mode == "blocked":
            mp.setattr(kernel, "MIN_BLOCKED", 1)
            mp.setattr(chunked_path, "MIN_ROWS", 2)
            mp.setattr(chunked_path, "BLOCK_ELEMENTS", 8)
        _check_forward(m, m, inputs, call, info, want, tol)
        trace = m.trace(*inputs, **call)
    for name in ("q", "k", "v", "scores", "weights", "head_outputs", "contributions", "output"):
        torch.testing.assert_close(getattr(trace, name), want[name], **tol, msg=name)
    if grad:
        assert trace.output.grad_fn is not None


@FAST
@given(module_cases(view=True))
def test_head_group_view_equals_the_reference(case):
    m, inputs, batch_first, call, info = case
    want = _expected(m, batch_first, call, info)
    view = HeadGroupView(m, info["view"])
    _check_forward(view, m, inputs, call, info, want, _tolerance(m))


@FAST
@given(module_cases(talking=True))
def test_talking_heads_with_identity_mixing_equals_the_reference(case):
    m, inputs, batch_first, call, info = case
    want = _expected(m, batch_first, call, info)
    options = {
        "head_dim": m.head_dim,
        "rotary_base": m.rotary_base,
        "causal": m.causal,
        "bias": m.in_proj_bias is not None,
        "batch_first": m.batch_first,
        "dtype": F64,
    }
    talking = TalkingHeadsAttention(m.embed_dim, m.num_heads, **options)
    talking.load_state_dict(m.state_dict(), strict=False)
    tol = _tolerance(m)
    _check_forward(talking, m, inputs, call, info, want, tol)
    trace = talking.trace(*inputs, **call)
    for name in ("scores", "weights", "head_outputs", "output"):
        torch.testing.assert_close(getattr(trace, name), want[name], **tol, msg=name)

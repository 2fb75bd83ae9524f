"""Streaming statistics of a bare module against the materialised weights of ``trace``.

The reference below reduces the full (batch, head, q_pos, k_pos) weights of ``trace`` directly;
the streaming engine never holds them. Every mask of the module, GQA, rotary, the extra key
columns, a head mask and chunks of one query up to all of them must agree to 1e-5.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headlab import MultiHeadAttention
from headlab.attention.functional import entropy
from headlab.attention.module_statistics import PER_QUERY, attention_statistics

E, H, D = 35, 5, 7  # distinct sizes; head_dim 7 is free (H * D = E)
B, T = 3, 23


def materialised(trace, counted: torch.Tensor, special: dict[str, torch.Tensor]):
    """Per-head sums from the full weights: (sums, received (head, k_pos))."""
    w = trace.weights.double()  # (batch, head, q_pos, k_pos)
    c = counted.double()[:, None, :]  # (batch, 1, q_pos)
    q_pos, k_pos = w.shape[-2:]
    offsets = (torch.arange(q_pos)[:, None] - torch.arange(k_pos)[None, :]).abs().double()
    per_query = {
        "entropy": entropy(w),  # the one definition, from the weights
        "max_weight": w.amax(-1),
        "self": w.diagonal(dim1=-2, dim2=-1)[..., :q_pos],
        "distance": (w * offsets).sum(-1),
        "contribution_norm": trace.contributions.double().norm(dim=-1),
    }
    for name, index in special.items():
        per_query[name] = w[torch.arange(w.shape[0]), :, :, index]  # (batch, head, q_pos)
    sums = {name: (v * c).sum(dim=(0, 2)) for name, v in per_query.items()}
    prev = w.diagonal(offset=-1, dim1=-2, dim2=-1)  # queries 1..
    sums["prev"] = (prev * c[..., 1:]).sum(dim=(0, 2))
    received = torch.einsum("bhqk,bq->hk", w, counted.double())
    return sums, received


def check(mha, x, *, chunk_elements=97, counted=None, special=None, **masks):
    counted = torch.ones(x.shape[0], x.shape[1], dtype=torch.bool) if counted is None else counted
    special = special or {}
    trace = mha.trace(x, **masks)
    out, got = attention_statistics(
        mha, x, query_mask=counted, special=special, chunk_elements=chunk_elements, **masks
    )
    expected, received = materialised(trace, counted, special)
    torch.testing.assert_close(out, trace.output, atol=1e-5, rtol=1e-5)
    assert set(got.sums) == set(PER_QUERY) | set(special)
    for name, value in expected.items():
        torch.testing.assert_close(got.sums[name], value, atol=1e-5 * T, rtol=1e-5, msg=name)
    torch.testing.assert_close(got.received, received, atol=1e-5, rtol=1e-5)
    assert got.n_queries == int(counted.sum())
    assert got.n_prev == int(counted[:, 1:].sum())
    return got


def padding() -> torch.Tensor:
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, 17:] = True
    pad[2, 4:] = True
    return pad


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"num_kv_heads": 1},
        {"rotary_base": 100.0, "causal": True, "head_dim": 6, "num_kv_heads": 5},
        {"add_bias_kv": True, "add_zero_attn": True},
    ],
    ids=["plain", "mqa", "llama-like", "extra-keys"],
)
@pytest.mark.parametrize("masking", ["none", "padding", "causal", "padding+causal"])
def test_statistics_equal_the_materialised_weights(options, masking):
    torch.manual_seed(5)
    options = dict(options)
    head_dim = options.pop("head_dim", D)
    mha = MultiHeadAttention(E, H, batch_first=True, head_dim=head_dim, **options).eval()
    x = torch.randn(B, T, E)
    masks = {}
    counted = None
    if "padding" in masking:
        masks["key_padding_mask"] = padding()
        counted = ~padding()
    if "causal" in masking:
        masks["is_causal"] = True
    special = {"first": torch.zeros(B, dtype=torch.long), "last": torch.tensor([22, 16, 3])}
    check(mha, x, counted=counted, special=special, **masks)


@pytest.mark.parametrize("kind", ["bool-2d", "float-2d", "bool-3d"])
def test_attention_masks_of_every_form(kind):
    torch.manual_seed(7)
    mha = MultiHeadAttention(E, H, batch_first=True).eval()
    x = torch.randn(B, T, E)
    if kind == "bool-3d":
        mask = torch.rand(B * H, T, T) < 0.3
        mask[:, 3, :] = True  # a fully masked row: zero weights, as forward gives
    else:
        mask = torch.rand(T, T) < 0.3
        mask[5, :] = True
        if kind == "float-2d":
            mask = torch.randn(T, T).masked_fill(mask, float("-inf"))
    check(mha, x, attn_mask=mask)


def test_head_mask_scales_contributions_only():
    torch.manual_seed(2)
    mha = MultiHeadAttention(E, H, batch_first=True).eval()
    x = torch.randn(B, T, E)
    keep = torch.tensor([1.0, 0.0, 0.5, 1.0, 2.0])
    got = check(mha, x, head_mask=keep)
    assert got.sums["contribution_norm"][1] == 0
    assert got.sums["entropy"][1] > 0


def test_sequence_first_and_unbatched_inputs():
    torch.manual_seed(4)
    mha = MultiHeadAttention(E, H).eval()  # (pos, batch, E)
    x = torch.randn(T, B, E)
    out, sums = attention_statistics(mha, x, chunk_elements=50)
    torch.testing.assert_close(out, mha(x, x, x)[0], atol=1e-5, rtol=1e-5)
    mha.batch_first = True
    ref = attention_statistics(mha, x.transpose(0, 1).contiguous(), chunk_elements=10**6)[1]
    for name in PER_QUERY:
        torch.testing.assert_close(sums.sums[name], ref.sums[name], atol=1e-4, rtol=1e-5)
    single, _ = attention_statistics(mha, x[:, 0])
    torch.testing.assert_close(single, mha(x[:, 0], x[:, 0], x[:, 0])[0], atol=1e-5, rtol=1e-5)


@given(chunk=st.integers(min_value=1, max_value=B * H * T * T + 5))
def test_any_chunk_size_gives_the_same_statistics(chunk):
    torch.manual_seed(1)
    mha = MultiHeadAttention(E, H, batch_first=True, num_kv_heads=1, causal=True).eval()
    x = torch.randn(B, T, E)
    _, whole = attention_statistics(mha, x, chunk_elements=10**9)
    _, chunked = attention_statistics(mha, x, chunk_elements=chunk)
    for name in PER_QUERY:
        torch.testing.assert_close(chunked.sums[name], whole.sums[name], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(chunked.received, whole.received, atol=1e-5, rtol=1e-5)


def test_dropout_in_training_is_refused():
    mha = MultiHeadAttention(E, H, dropout=0.1)
    with pytest.raises(ValueError, match="eval mode"):
        attention_statistics(mha, torch.randn(T, B, E))


def test_entropy_by_hand():
    rows = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    expected = torch.tensor([math.log(4), 0.0, math.log(2)])
    torch.testing.assert_close(entropy(rows), expected)
    torch.testing.assert_close(entropy(rows.T, dim=0), expected)  # along another dim


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_entropy_equals_xlogy_with_zeros_and_its_gradient(dtype):
    # torch's own 0 ln 0 = 0 (xlogy) as the reference, rows with exact zeros and tiny weights
    torch.manual_seed(11)
    p = torch.softmax(torch.randn(3, 5, 7, dtype=torch.float64) * 6, dim=-1).to(dtype)
    p[0, 0, :3] = 0.0
    expected = -torch.special.xlogy(p, p).sum(-1)
    torch.testing.assert_close(entropy(p), expected, rtol=1e-6, atol=1e-6)
    if dtype == torch.float64:
        logits = torch.randn(2, 3, 5, dtype=dtype, requires_grad=True)
        torch.autograd.gradcheck(lambda x: entropy(torch.softmax(x, -1)), (logits,))


@pytest.mark.parametrize("grad", [False, True])
def test_observing_keeps_weights_scores_and_unbatched_calls(grad):
    """A statistics request only watches: forward's weights (averaged and per head), trace's
    scores and weights and unbatched calls are those of the unobserved module, and the sums of
    each call equal those of its own weights (a bug dropped the weights: None, and unbatched
    calls crashed)."""
    from headlab.attention.streaming_sums import StatisticsRequest, observing

    torch.manual_seed(7)
    mha = MultiHeadAttention(E, H, batch_first=True, num_kv_heads=1).eval()
    x = torch.randn(B, T, E, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        want_trace = mha.trace(x)
        want = {avg: mha(x, x, x, average_attn_weights=avg) for avg in (True, False)}
        want_unbatched = mha(x[0], x[0], x[0])
        got_sums = []
        with observing(mha, StatisticsRequest(report=got_sums.append)):
            trace = mha.trace(x)
            got = {avg: mha(x, x, x, average_attn_weights=avg) for avg in (True, False)}
            unbatched = mha(x[0], x[0], x[0])
            no_weights, none = mha(x, x, x, need_weights=False)
    assert none is None
    assert len(got_sums) == 5
    for name in ("q", "k", "v", "scores", "weights", "head_outputs", "output"):
        torch.testing.assert_close(getattr(trace, name), getattr(want_trace, name), msg=name)
    assert (trace.output.grad_fn is not None) == grad
    for avg in (True, False):
        for a, b in zip(got[avg], want[avg], strict=True):
            torch.testing.assert_close(a, b)
    for a, b in zip(unbatched, want_unbatched, strict=True):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(no_weights, want[True][0], atol=1e-6, rtol=1e-5)
    counted = torch.ones(B, T, dtype=torch.bool)
    expected, received = materialised(want_trace.detach(), counted, {})
    for sums in (got_sums[0], got_sums[-1]):  # from trace's weights, and streamed in chunks
        for name, value in expected.items():
            torch.testing.assert_close(sums.sums[name], value, atol=1e-5 * T, rtol=1e-5, msg=name)
        torch.testing.assert_close(sums.received, received, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 0, E), (0, T, E)], ids=["no query", "no batch element"])
def test_empty_inputs_stream_nothing(shape):
    """No query counted, every sum 0, an empty output like forward's (GQA, rotary, causal)."""
    mha = MultiHeadAttention(
        E, H, head_dim=6, num_kv_heads=1, rotary_base=50.0, causal=True, batch_first=True
    )
    x = torch.randn(*shape)
    out, got = attention_statistics(mha, x)
    assert out.shape == shape and got.n_queries == 0 and got.n_prev == 0
    assert all((s == 0).all() for s in got.sums.values())
    assert got.received.shape == (H, shape[1])

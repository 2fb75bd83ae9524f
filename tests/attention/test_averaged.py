"""The default path (weights averaged over heads): its hand-written backward against autograd and
finite differences in float64, and its blocked inference loop against the explicit path."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import headlab.attention.chunked as chunked_path
import headlab.attention.kernel as kernel
from headlab import MultiHeadAttention
from headlab.attention.averaged import AveragedAttention
from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.masks import torch_mask_spec

F64 = torch.float64
B, H, L, S, D = 2, 3, 5, 7, 4  # distinct sizes


def _qkv(seed: int, grad: bool = True):
    g = torch.Generator().manual_seed(seed)
    shapes = ((B, H, L, D), (B, H, S, D), (B, H, S, D))
    return [torch.randn(*s, dtype=F64, generator=g).requires_grad_(grad) for s in shapes]


def _mask(kind: str):
    """A mask over L queries and S keys: none, padding, or padding with dead rows."""
    if kind == "none":
        return None
    padding = torch.zeros(B, S, dtype=torch.bool)
    padding[1, 4:] = True
    attn = torch.zeros(L, S, dtype=torch.bool)
    if kind == "dead_rows":
        attn[2, :] = True  # query 2 sees no key at all
    return torch_mask_spec(
        attn_mask=attn,
        key_padding_mask=padding,
        is_causal=False,
        batch=B,
        num_heads=H,
        q_len=L,
        k_len=S,
        extra_keys=0,
        batched=True,
    )


def _merged(mask):
    """The whole mask as AveragedAttention takes it."""
    return None if mask is None else mask.block(0, L, S, dtype=F64, device=torch.device("cpu"))


def explicit_attention(q, k, v, mask):
    """(head_out, per-head weights, scores) of the kernel's explicit path."""
    run = attend(q, k, v, mask, AttendOptions(need_weights="heads"))
    return run.head_out, run.weights, run.scores


def blocked_mean_attention(q, k, v, mask):
    """The kernel's chunked loop, averaging the weights over heads."""
    return chunked_path.chunked(
        q,
        k,
        v,
        mask,
        scale=D**-0.5,
        softcap=None,
        sinks=None,
        view=None,
        mean=True,
        sums=None,
        chunk_elements=2**22,
    )


def mean_attention(q, k, v):
    run = attend(q, k, v, None, AttendOptions(need_weights="mean"))
    return run.head_out, run.weights


@pytest.mark.parametrize("kind", ["none", "padding", "dead_rows"])
def test_backward_matches_autograd_of_the_explicit_path(kind):
    mask = _mask(kind)
    q, k, v = _qkv(0)
    out, mean = AveragedAttention.apply(q, k, v, _merged(mask), D**-0.5)
    ref_out, weights, _ = explicit_attention(q, k, v, mask)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(mean, weights.mean(dim=1))
    g_out, g_mean = torch.randn_like(out), torch.randn_like(mean)
    ours = torch.autograd.grad((out * g_out).sum() + (mean * g_mean).sum(), (q, k, v))
    ref = torch.autograd.grad(
        (ref_out * g_out).sum() + (weights.mean(dim=1) * g_mean).sum(), (q, k, v)
    )
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kind", ["none", "dead_rows"])
def test_backward_against_finite_differences(kind):
    merged = _merged(_mask(kind))
    assert torch.autograd.gradcheck(
        lambda q, k, v: AveragedAttention.apply(q, k, v, merged, D**-0.5), _qkv(1)
    )
    # one output unused: its gradient arrives as None
    assert torch.autograd.gradcheck(
        lambda q, k, v: AveragedAttention.apply(q, k, v, merged, D**-0.5)[1], _qkv(2)
    )


@given(
    rows=st.integers(1, 6),
    block=st.sampled_from([1, 8, 40, 10**6]),
    kind=st.sampled_from(["none", "padding", "dead_rows"]),
)
def test_blocked_loop_equals_the_whole_tensor(rows, block, kind):
    mask = _mask(kind)
    q, k, v = _qkv(3, grad=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chunked_path, "MIN_ROWS", rows)
        mp.setattr(chunked_path, "BLOCK_ELEMENTS", block)
        out, mean = blocked_mean_attention(q, k, v, mask)
    ref_out, weights, _ = explicit_attention(q, k, v, mask)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(mean, weights.mean(dim=1))


def test_inference_takes_the_blocked_loop_and_training_the_function(monkeypatch):
    calls = []
    original = kernel.chunked
    monkeypatch.setattr(kernel, "MIN_BLOCKED", 1)
    monkeypatch.setattr(kernel, "chunked", lambda *a, **o: calls.append(1) or original(*a, **o))
    q, k, v = _qkv(4)
    with torch.no_grad():
        mean_attention(q, k, v)
    assert calls == [1]
    out, _ = mean_attention(q, k, v)
    assert calls == [1] and out.grad_fn is not None


@pytest.mark.parametrize("mode", ["train", "inference"])
@pytest.mark.parametrize("block", [16, 10**6], ids=["blocks of rows", "one block per batch"])
def test_default_forward_matches_torch_with_masks(mode, block, monkeypatch):
    """Through the module, with blocking forced on: torch's module with repeated K/V weights.
    One block per batch element reads the split heads' K and V in place (strided views);
    several blocks read a contiguous copy."""
    monkeypatch.setattr(kernel, "MIN_BLOCKED", 1)
    monkeypatch.setattr(chunked_path, "MIN_ROWS", 2)
    monkeypatch.setattr(chunked_path, "BLOCK_ELEMENTS", block)
    torch.manual_seed(0)
    ours = MultiHeadAttention(12, 4, batch_first=True, dtype=F64)
    theirs = torch.nn.MultiheadAttention(12, 4, batch_first=True, dtype=F64)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 5, 12, dtype=F64, requires_grad=True)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[2, 3:] = True
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    results = []
    for m in (ours, theirs):
        m.train(mode == "train")
        with torch.inference_mode(mode == "inference"):
            out, w = m(x, x, x, key_padding_mask=padding, attn_mask=causal)
        if mode == "train":
            grads = torch.autograd.grad((out.sum() + (w * w).sum()), [x, *m.parameters()])
            results.append((out, w, *grads))
        else:
            results.append((out, w))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b)

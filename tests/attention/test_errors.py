"""Every bad input is a ValueError that names the expected and the received value."""

from __future__ import annotations

import pytest
import torch

from headlab import MultiHeadAttention


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"embed_dim": 512, "num_heads": 3}, r"embed_dim=512 is not divisible by num_heads=3"),
        ({"embed_dim": 12, "num_heads": 0}, r"num_heads must be a positive integer, got 0"),
        ({"embed_dim": -4, "num_heads": 2}, r"embed_dim must be a positive integer, got -4"),
        (
            {"embed_dim": 12, "num_heads": 4, "num_kv_heads": 3},
            r"num_heads=4 is not divisible by num_kv_heads=3",
        ),
        ({"embed_dim": 12, "num_heads": 4, "head_dim": 0}, r"head_dim must be a positive"),
        (
            {"embed_dim": 12, "num_heads": 4, "dropout": 1.5},
            r"dropout must be in \[0, 1\), got 1.5",
        ),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


def test_free_head_size_lifts_the_divisibility_rule():
    m = MultiHeadAttention(512, 3, head_dim=64)
    assert m.in_proj_weight.shape == (3 * 3 * 64, 512) and m.out_proj.weight.shape == (512, 192)


M = MultiHeadAttention(12, 3, batch_first=True)
X = torch.randn(2, 5, 12)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: M(torch.randn(2, 5, 11), X, X),
            r"query last dim must be 12, got shape \(2, 5, 11\)",
        ),
        (lambda: M(X, torch.randn(2, 5, 12, 1), X), r"key must have 3 dims like query"),
        (lambda: M(torch.randn(12), X, X), r"query must have 3 dims .* got shape \(12,\)"),
        (lambda: M(X, X, torch.randn(2, 4, 12)), r"key and value must agree"),
        (lambda: M(X, torch.randn(3, 5, 12), torch.randn(3, 5, 12)), r"key batch size must be 2"),
        (lambda: M(X.double(), X.double(), X.double()), r"query dtype must be torch.float32"),
        (
            lambda: M(X, X, X, attn_mask=torch.zeros(5, 6, dtype=torch.bool)),
            r"attn_mask of 2 dims must have shape \(q_pos, k_pos\)=\(5, 5\), got \(5, 6\)",
        ),
        (
            lambda: M(X, X, X, attn_mask=torch.zeros(3, 5, 5, dtype=torch.bool)),
            r"\(batch \* num_heads, q_pos, k_pos\)=\(6, 5, 5\), got \(3, 5, 5\)",
        ),
        (
            lambda: M(X, X, X, attn_mask=torch.zeros(1, 1, 5, 5, dtype=torch.bool)),
            r"attn_mask must have 2 or 3 dims, got 4",
        ),
        (
            lambda: M(X, X, X, attn_mask=torch.zeros(5, 5, dtype=torch.int64)),
            r"attn_mask must be bool or floating point, got dtype torch.int64",
        ),
        (
            lambda: M(X, X, X, key_padding_mask=torch.zeros(5, 2, dtype=torch.bool)),
            r"key_padding_mask must have shape \(2, 5\) .* got \(5, 2\)",
        ),
        (
            lambda: M(X, X, X, key_padding_mask=torch.zeros(5, dtype=torch.bool)),
            r"key_padding_mask must have shape \(2, 5\)",
        ),
        (
            lambda: M(X, X, X, head_mask=torch.ones(4)),
            r"head_mask must have shape \(num_heads,\)=\(3,\) or "
            r"\(batch, num_heads\)=\(2, 3\), got \(4,\)",
        ),
        (lambda: M("x", X, X), r"query must be a torch.Tensor, got str"),
    ],
)
def test_bad_forward_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "kwargs",
    [{"embed_dim": 10**6, "num_heads": 1}, {"embed_dim": 64, "num_heads": 2, "head_dim": 10**9}],
)
def test_a_module_too_large_for_memory_is_refused_before_allocating(kwargs):
    """The estimate (every parameter, in the dtype) against the machine, before any tensor: the
    first would otherwise ask the allocator for terabytes."""
    from headlab.limits import machine_memory

    if not machine_memory():
        pytest.skip("this machine's memory is unknown")
    with pytest.raises(
        ValueError,
        match=r"with [\d,]+ parameters needs about [\d.]+ GiB, more "
        r"than half of this machine's .*refused before starting",
    ):
        MultiHeadAttention(**kwargs)
    MultiHeadAttention(**kwargs, device="meta")  # meta tensors take no memory: built


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"bias": False},
        {"add_bias_kv": True, "kdim": 5, "vdim": 7},
        {"num_kv_heads": 2, "head_dim": 3, "add_bias_kv": True},
    ],
)
def test_the_estimate_counts_every_parameter(kwargs):
    from headlab.analysis.params import parameter_count
    from headlab.attention.sizes import parameter_elements

    m = MultiHeadAttention(12, 4, **kwargs)
    q_dim, kv_dim = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    extras = {"bias": m.in_proj_bias is not None, "add_bias_kv": m.bias_k is not None}
    estimate = parameter_elements(12, m.kdim, m.vdim, q_dim, kv_dim, **extras)
    assert estimate == parameter_count(m)

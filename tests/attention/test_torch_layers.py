"""headlab's module as the attention of torch's Transformer layers, in every mode.

The outside reference is the same torch layer with torch's own MultiheadAttention and the same
weights. torch's encoder layer replaces the attention's forward with its fused kernel
(torch._transformer_encoder_layer_fwd) in eval mode without grad; it may do so only for a plain
configuration, and never for grouped K/V heads or a free head size.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext

import pytest
import torch
from torch import nn

from headlab import MultiHeadAttention

B, L, S, E, H = 3, 7, 5, 20, 4  # distinct sizes; torch's fast path needs an even head count
MODES = ["train", "eval", "no_grad", "inference_mode"]
# torch's own nested-tensor path warns (once per process) that nested tensors are a prototype
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")


def _mode(module: nn.Module, mode: str):
    module.train(mode == "train")
    return {"no_grad": torch.no_grad(), "inference_mode": torch.inference_mode()}.get(
        mode, nullcontext()
    )


def _ours(theirs: nn.MultiheadAttention) -> MultiHeadAttention:
    ours = MultiHeadAttention(E, H, batch_first=theirs.batch_first)
    ours.load_state_dict(theirs.state_dict())
    return ours


def _swap(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every torch MultiheadAttention replaced by headlab's."""
    model = copy.deepcopy(model)
    for module in list(model.modules()):
        for name in ("self_attn", "multihead_attn"):
            attn = getattr(module, name, None)
            if isinstance(attn, nn.MultiheadAttention):
                setattr(module, name, _ours(attn))
    return model


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randn(B, L, E, generator=g), torch.randn(B, S, E, generator=g)
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[1, 4:], padding[2, 6:] = True, True  # right padding, no fully masked row
    return src, tgt, padding


class FusedKernelCalls:
    """Counts calls of torch's fused encoder-layer kernel (looked up on torch at call time)."""

    def __enter__(self):
        self.calls, self.original = 0, torch._transformer_encoder_layer_fwd

        def counting(*args, **kwargs):
            self.calls += 1
            return self.original(*args, **kwargs)

        torch._transformer_encoder_layer_fwd = counting
        return self

    def __exit__(self, *exc):
        torch._transformer_encoder_layer_fwd = self.original


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def _assert_same_in_mode(theirs: nn.Module, ours: nn.Module, mode: str, call) -> None:
    """call(ours) equals call(theirs), each run in ``mode``."""
    results = []
    for model in (theirs, ours):
        with _mode(model, mode):
            results.append(call(model))
    _close(results[1], results[0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("masks", ["none", "causal", "padding", "both", "per_head"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(mode, masks, norm_first):
    torch.manual_seed(1)
    theirs = nn.TransformerEncoderLayer(
        E, H, 23, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    ours = _swap(theirs)
    src, _, padding = _inputs()
    attn_mask = {
        "causal": nn.Transformer.generate_square_subsequent_mask(L),
        "both": torch.ones(L, L, dtype=torch.bool).triu(1),
        # (batch * head, q_pos, k_pos), the diagonal always allowed: no fully masked row
        "per_head": (torch.rand(B * H, L, L, generator=torch.Generator().manual_seed(2)) > 0.6)
        & ~torch.eye(L, dtype=torch.bool),
    }.get(masks)
    kpm = padding if masks in ("padding", "both") else None
    _assert_same_in_mode(
        theirs, ours, mode, lambda layer: layer(src, src_mask=attn_mask, src_key_padding_mask=kpm)
    )


@pytest.mark.parametrize("mode", MODES)
def test_decoder_layer_matches_torch(mode):
    torch.manual_seed(2)
    theirs = nn.TransformerDecoderLayer(E, H, 23, dropout=0.0, batch_first=True)
    ours = _swap(theirs)
    assert isinstance(ours.self_attn, MultiHeadAttention)
    assert isinstance(ours.multihead_attn, MultiHeadAttention)
    memory, tgt, padding = _inputs()
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(S)
    _assert_same_in_mode(
        theirs,
        ours,
        mode,
        lambda layer: layer(
            tgt, memory, tgt_mask=tgt_mask, memory_key_padding_mask=padding, tgt_is_causal=True
        ),
    )


@pytest.mark.parametrize("mode", MODES)
def test_transformer_matches_torch(mode):
    torch.manual_seed(3)
    theirs = nn.Transformer(E, H, 2, 2, 23, dropout=0.0, batch_first=True)
    ours = _swap(theirs)
    src, tgt, padding = _inputs()
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(S)
    _assert_same_in_mode(
        theirs,
        ours,
        mode,
        lambda model: model(
            src,
            tgt,
            tgt_mask=tgt_mask,
            src_key_padding_mask=padding,
            memory_key_padding_mask=padding,
        ),
    )


@pytest.mark.parametrize("mode", MODES)
def test_encoder_with_nested_tensor_path_matches_torch(mode):
    torch.manual_seed(4)
    layer = nn.TransformerEncoderLayer(E, H, 23, dropout=0.0, batch_first=True)
    theirs = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)
    ours = _swap(theirs)
    src, _, padding = _inputs()
    results = []
    for encoder in (theirs, ours):
        with _mode(encoder, mode), FusedKernelCalls() as kernel:
            results.append(encoder(src, src_key_padding_mask=padding))
        # torch runs its fused kernel on the nested tensor in eval without grad, for both
        assert (kernel.calls > 0) == (mode in ("no_grad", "inference_mode"))
    # the padded positions are zeros (nested path) or whatever the layer computed there
    real = ~padding
    _close(results[1][real], results[0][real])


@pytest.mark.parametrize("masks", ["none", "padding", "causal"])
def test_fused_kernel_equals_headlabs_own_path(masks):
    """For a plain configuration torch's kernel runs in place of our forward; it must agree."""
    torch.manual_seed(5)
    layer = _swap(nn.TransformerEncoderLayer(E, H, 23, dropout=0.0, batch_first=True)).eval()
    src, _, padding = _inputs()
    kpm = padding if masks == "padding" else None
    mask = torch.ones(L, L, dtype=torch.bool).triu(1) if masks == "causal" else None
    with torch.no_grad(), FusedKernelCalls() as kernel:
        fused = layer(src, src_mask=mask, src_key_padding_mask=kpm)
    assert kernel.calls == 1
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), FusedKernelCalls() as kernel:
            own = layer(src, src_mask=mask, src_key_padding_mask=kpm)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    assert kernel.calls == 0
    real = ~padding if kpm is not None else torch.ones(B, L, dtype=torch.bool)
    _close(fused[real], own[real])


def _repeat_kv(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """torch's module computing the same as a GQA module: each K/V head copied to its group."""
    w_q, w_k, w_v = ours.projection_weights()
    b_q, b_k, b_v = ours.projection_biases()
    d, group = ours.head_dim, ours.num_heads // ours.num_kv_heads

    def repeat(t):
        return t.view(ours.num_kv_heads, d, *t.shape[1:]).repeat_interleave(group, 0).flatten(0, 1)

    full = nn.MultiheadAttention(E, ours.num_heads, batch_first=True)
    with torch.no_grad():
        full.in_proj_weight.copy_(torch.cat([w_q, repeat(w_k), repeat(w_v)]))
        full.in_proj_bias.copy_(torch.cat([b_q, repeat(b_k), repeat(b_v)]))
        full.out_proj.load_state_dict(ours.out_proj.state_dict())
    return full


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nested", [False, True])
def test_grouped_kv_heads_run_headlabs_math_inside_torch_layers(mode, nested):
    torch.manual_seed(6)
    theirs = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(E, H, 23, dropout=0.0, batch_first=True),
        2,
        enable_nested_tensor=nested,
    )
    ours = copy.deepcopy(theirs)
    for layer, reference in zip(ours.layers, theirs.layers, strict=True):
        layer.self_attn = MultiHeadAttention(E, H, num_kv_heads=2, batch_first=True)
        reference.self_attn = _repeat_kv(layer.self_attn)
    assert not ours.layers[0].self_attn._qkv_same_embed_dim
    src, _, padding = _inputs()
    results = []
    for encoder in (theirs, ours):
        with _mode(encoder, mode), FusedKernelCalls() as kernel:
            results.append(encoder(src, src_key_padding_mask=padding))
        if encoder is ours:
            assert kernel.calls == 0
    _close(results[1][~padding], results[0][~padding])


@pytest.mark.parametrize("mode", MODES)
def test_free_head_size_never_reaches_torchs_kernel(mode):
    """H * D != E: no torch module computes it; the reference is the layer written out."""
    torch.manual_seed(7)
    layer = nn.TransformerEncoderLayer(E, H, 23, dropout=0.0, batch_first=True)
    layer.self_attn = MultiHeadAttention(E, H, head_dim=3, batch_first=True)
    src, _, padding = _inputs()
    with _mode(layer, mode), FusedKernelCalls() as kernel:
        got = layer(src, src_key_padding_mask=padding)
        attn = layer.self_attn(src, src, src, key_padding_mask=padding, need_weights=False)[0]
        x = layer.norm1(src + attn)
        expected = layer.norm2(x + layer.linear2(layer.activation(layer.linear1(x))))
    assert kernel.calls == 0
    _close(got, expected)


@pytest.mark.parametrize("option", [{"rotary_base": 100.0, "head_dim": 4}, {"causal": True}])
def test_rotary_and_causal_modules_are_not_handed_to_torchs_kernel(option):
    assert MultiHeadAttention(E, H, batch_first=True)._qkv_same_embed_dim
    assert not MultiHeadAttention(E, H, batch_first=True, **option)._qkv_same_embed_dim


def test_merge_masks_matches_torch():
    theirs = nn.MultiheadAttention(E, H, batch_first=True)
    ours = _ours(theirs)
    src, _, padding = _inputs()
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    per_head = torch.rand(B * H, L, L, generator=torch.Generator().manual_seed(3)) > 0.7
    for attn_mask in (None, causal, per_head):
        for kpm in (None, padding):
            m_ours, t_ours = ours.merge_masks(attn_mask, kpm, src)
            m_theirs, t_theirs = theirs.merge_masks(attn_mask, kpm, src)
            assert t_ours == t_theirs
            assert (m_ours is None and m_theirs is None) or torch.equal(m_ours, m_theirs)

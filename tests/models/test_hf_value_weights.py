"""W_V, W_O and the input norm's scale as the probe finds them, against each family's own
parameters (separate, fused [q; k; v] and per-head interleaved projections; Gemma's 1 + weight
norm; post-norm and norm-free layers)."""

from __future__ import annotations

import pytest
import torch
from hf_families import build

from headlab.models.hf import attach


def _own_weights(name: str, model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(W_V (kv_head * d_head, embed), W_O (embed, head * d_head), input norm scale or None)
    of layer 0, read from the family's modules by hand."""
    if name == "gpt2":
        block = model.transformer.h[0]
        width = model.config.n_embd
        c_attn = block.attn.c_attn.weight  # Conv1D: (in, 3 * embed) = [q | k | v]
        return c_attn[:, 2 * width :].t(), block.attn.c_proj.weight.t(), block.ln_1.weight
    if name == "gpt_neox":
        block = model.gpt_neox.layers[0]
        heads, width = model.config.num_attention_heads, model.config.hidden_size
        d = width // heads
        fused = block.attention.query_key_value.weight.view(heads, 3, d, width)  # per head q,k,v
        return (
            fused[:, 2].reshape(heads * d, width),
            block.attention.dense.weight,
            block.input_layernorm.weight,
        )
    if name == "phi3":
        block = model.model.layers[0]
        q = model.config.num_attention_heads * model.config.head_dim
        kv = model.config.num_key_value_heads * model.config.head_dim
        fused = block.self_attn.qkv_proj.weight
        return fused[q + kv :], block.self_attn.o_proj.weight, block.input_layernorm.weight
    if name == "bert":
        attention = model.encoder.layer[0].attention
        return attention.self.value.weight, attention.output.dense.weight, None
    block = model.model.layers[0]
    if name == "olmo2":  # post-norm: the projections read the residual stream itself
        return block.self_attn.v_proj.weight, block.self_attn.o_proj.weight, None
    norm = block.input_layernorm.weight
    if name.startswith("gemma"):
        norm = 1 + norm
    return block.self_attn.v_proj.weight, block.self_attn.o_proj.weight, norm


@pytest.mark.parametrize(
    "name", ["llama", "qwen3", "gemma2", "phi3", "olmo2", "gpt2", "gpt_neox", "bert"]
)
def test_value_output_weights_and_input_scale_are_the_familys_own(name):
    model = build(name)
    layer = attach(model).attention_layers()[0]
    want_v, want_o, want_scale = _own_weights(name, model)
    w_v, w_o = layer.value_output_weights()
    torch.testing.assert_close(w_v, want_v, rtol=0, atol=0)
    torch.testing.assert_close(w_o, want_o, rtol=0, atol=0)
    scale = layer.input_scale()
    if want_scale is None:
        assert scale is None
    else:
        torch.testing.assert_close(scale, want_scale.detach(), rtol=1e-5, atol=1e-5)


def test_value_output_weights_are_refused_for_a_view():
    layer = attach(build("llama")).with_head_view(2).attention_layers()[0]
    with pytest.raises(ValueError, match="view of merged heads has no W_V"):
        layer.value_output_weights()


def test_a_norm_of_another_form_is_refused():
    from headlab.models.hf.layer import norm_scale

    class Squash(torch.nn.Module):  # a 1-D weight, but not n(x) * g + b
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(7))

        def forward(self, x):
            return torch.tanh(x) * self.weight

    with pytest.raises(ValueError, match="not a scaled normalisation"):
        norm_scale(Squash(), 7)


@pytest.mark.parametrize("width", [7, 12])
def test_norm_scale_of_torch_layer_norm_and_rms_norm(width):
    from headlab.models.hf.layer import norm_scale

    generator = torch.Generator().manual_seed(width)
    for norm in (torch.nn.LayerNorm(width), torch.nn.RMSNorm(width, eps=1e-6)):
        with torch.no_grad():
            norm.weight.copy_(torch.randn(width, generator=generator) + 0.5)
        torch.testing.assert_close(norm_scale(norm, width), norm.weight.detach())


def test_a_transposed_output_weight_is_copied_once_while_unchanged():
    """GPT-2's Conv1D stores W_O as (in, out): its (out, in) copy is made once, so that the
    contribution norms' factors kept per W_O are found again, and made again when the weight
    changes in place; with a gradient asked for, W_O stays on the autograd graph."""
    from headlab.attention.output_norms import head_factors

    model = build("gpt2")
    layer = attach(model).attention_layers()[0]
    c_proj = model.transformer.h[0].attn.c_proj.weight
    with torch.no_grad():
        first = layer.output_weight()
        assert layer.output_weight() is first and first.is_contiguous()
        heads = model.config.n_head
        assert head_factors(layer.output_weight(), heads) is head_factors(first, heads)
        c_proj.mul_(-0.5)
        changed = layer.output_weight()
    assert changed is not first
    torch.testing.assert_close(changed, c_proj.t(), rtol=0, atol=0)
    with torch.enable_grad():
        on_graph = layer.output_weight()
        on_graph.sum().backward()
    assert on_graph.requires_grad and c_proj.grad is not None

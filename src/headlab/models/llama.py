"""A Llama-family decoder (Llama, Mistral, Qwen2; SmolLM2) built from headlab's attention.

    x = embed(ids)                                                     (batch, pos, E)
    for each layer:
        x = x + Attention(RMSNorm(x))      causal, rotary q/k, grouped K/V heads
        x = x + W_down(silu(W_gate h) * W_up h),  h = RMSNorm(x)
    logits = RMSNorm(x) W_lm^T                                         (batch, pos, vocab)

The attention of each layer is ``headlab.MultiHeadAttention`` with ``rotary_base`` and
``causal``: every per-head intermediate (q and k after rotation, scores, weights, head outputs,
contributions) is in its trace. Inputs are padded on the right; padded keys are masked.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headlab.attention import AttentionTrace, MultiHeadAttention
from headlab.attention.views import shared_view
from headlab.models.interface import HeadMask, layer_masks
from headlab.models.llama_config import LlamaConfig


class RMSNorm(nn.Module):
    """x / rms(x) * weight, the mean of squares taken in float32 (as transformers does)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


class SwiGLU(nn.Module):
    """W_down(silu(W_gate x) * W_up x): (batch, pos, E) -> (batch, pos, E)."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def attention_for(config: LlamaConfig) -> MultiHeadAttention:
    """The attention of one layer: causal, rotary, GQA; biases on q/k/v only when the config says
    so (Qwen2; the output projection's bias is then kept at zero)."""
    attention = MultiHeadAttention(
        config.hidden_size,
        config.num_attention_heads,
        bias=config.attention_bias,
        batch_first=True,
        head_dim=config.head_dim,
        num_kv_heads=config.num_key_value_heads,
        rotary_base=config.rope_theta,
        causal=True,
    )
    if config.attention_bias:
        with torch.no_grad():
            attention.out_proj.bias.zero_()
        attention.out_proj.bias.requires_grad_(False)
    return attention


class LlamaLayer(nn.Module):
    """One decoder block: pre-norm attention and pre-norm SwiGLU, both residual."""

    def __init__(self, config: LlamaConfig, attention: MultiHeadAttention | None = None) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attention = attention if attention is not None else attention_for(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def with_attention(self, attention: MultiHeadAttention) -> LlamaLayer:
        """The same layer (norms and MLP shared) with another attention module."""
        return shared_view(self, attention=attention)

    def forward(self, x: Tensor, padding: Tensor | None, head_mask: Tensor | None = None) -> Tensor:
        """x: (batch, pos, E); padding: (batch, pos) True on padded keys, or None."""
        h = self.input_layernorm(x)
        attended, _ = self.attention(
            h, h, h, key_padding_mask=padding, need_weights=False, head_mask=head_mask
        )
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x))

    def trace(
        self, x: Tensor, padding: Tensor | None, head_mask: Tensor | None = None
    ) -> tuple[Tensor, AttentionTrace]:
        """Like forward through the explicit path; returns (layer output, attention trace)."""
        h = self.input_layernorm(x)
        t = self.attention.trace(h, key_padding_mask=padding, head_mask=head_mask)
        x = x + t.output
        return x + self.mlp(self.post_attention_layernorm(x)), t


class LlamaDecoder(nn.Module):
    """Embeddings, the decoder layers, the final norm and the language-model head."""

    def __init__(self, config: LlamaConfig, layers: Sequence[LlamaLayer] | None = None) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            layers
            if layers is not None
            else [LlamaLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def with_layers(self, layers: Sequence[LlamaLayer]) -> LlamaDecoder:
        """The same decoder (embeddings, norm, head shared) with other layers."""
        return shared_view(self, layers=nn.ModuleList(layers))

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, head_mask: HeadMask = None
    ) -> Tensor:
        """input_ids (batch, pos) -> logits (batch, pos, vocab). attention_mask: True on real
        tokens (padding on the right). Fused attention path."""
        x = self.embed_tokens(input_ids)
        padding = None if attention_mask is None or attention_mask.all() else ~attention_mask
        for layer, mask in zip(self.layers, layer_masks(head_mask, len(self.layers)), strict=True):
            x = layer(x, padding, mask)
        return self.lm_head(self.norm(x))

    def trace(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, head_mask: HeadMask = None
    ) -> tuple[Tensor, list[AttentionTrace]]:
        """Like forward through the explicit path; returns (logits, one trace per layer)."""
        x = self.embed_tokens(input_ids)
        padding = None if attention_mask is None or attention_mask.all() else ~attention_mask
        traces = []
        for layer, mask in zip(self.layers, layer_masks(head_mask, len(self.layers)), strict=True):
            x, t = layer.trace(x, padding, mask)
            traces.append(t)
        return self.lm_head(self.norm(x)), traces

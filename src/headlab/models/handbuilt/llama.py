"""A Llama-family decoder in plain torch, read from a transformers ``LlamaForCausalLM``
state_dict (Llama, SmolLM2; Qwen2's q/k/v biases too).

    x = embed[ids]                                                     (batch, pos, d_model)
    for each layer (pre-norm):
        h = RMSNorm(x)
        q, k = rotate(h W_Q), rotate(h W_K); v = h W_V       each K/V head serves a group of
        x = x + W_O attention(q, k, v, causal)                 query heads (grouped-query)
        h = RMSNorm(x)
        x = x + W_down(silu(W_gate h) * W_up h)
    logits = RMSNorm(x) W_lm^T                                           (batch, pos, vocab)

Rotary position: each pair (i, i + d_head/2) of a query or key is rotated by the angle
position * theta^(-2i/d_head). Two precision choices follow transformers, so that a float64
run agrees with it to rounding: RMSNorm's statistics and the rotary angles are computed in
float32. Padded keys (``attention_mask`` False, padding on the right) get no weight.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.models.handbuilt.dot_product_attention import attention


@dataclass(frozen=True)
class LlamaOutput:
    """logits: (batch, pos, vocab); attentions: one (batch, head, q_pos, k_pos) tensor of
    attention weights per layer."""

    logits: Tensor
    attentions: list[Tensor]


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (statistics in float32)."""
    x32 = x.to(torch.float32)
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def rope_theta(config) -> float:
    """The rotary base of a transformers config; ValueError for a scaled rotary (llama3, yarn,
    ...), which this reference does not implement."""
    params = getattr(config, "rope_parameters", None) or {}
    kind = params.get("rope_type", "default")
    if kind != "default":
        raise ValueError(f"rope_type must be 'default', got {kind!r}")
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def rotate(x: Tensor, theta: float) -> Tensor:
    """x: (batch, head, pos, d_head) rotated by position (transformers' half-split layout)."""
    d = x.shape[-1]
    inverse = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)  # (d_head/2,)
    angles = torch.arange(x.shape[-2], dtype=torch.float32)[:, None] * inverse  # (pos, d_head/2)
    angles = torch.cat([angles, angles], dim=-1)  # (pos, d_head)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-second, first], dim=-1) * sin


def _linear(state: Mapping[str, Tensor], name: str, x: Tensor) -> Tensor:
    """x W^T (+ b when the state holds a bias) with the nn.Linear called ``name``."""
    return F.linear(x, state[f"{name}.weight"], state.get(f"{name}.bias"))


def llama_forward(
    state: Mapping[str, Tensor], config, input_ids: Tensor, attention_mask: Tensor | None = None
) -> LlamaOutput:
    """The decoder's next-token logits for ``input_ids`` (batch, pos).

    state: a ``LlamaForCausalLM`` state_dict (without ``lm_head.weight`` the embeddings serve as
    the head, tied); config: its ``transformers.LlamaConfig`` (``num_attention_heads``,
    ``num_key_value_heads``, ``num_hidden_layers``, ``rms_norm_eps``, the rotary base).
    attention_mask: (batch, pos), nonzero on real tokens. Computes in the dtype of the weights.
    """
    batch, pos = input_ids.shape
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    theta, eps = rope_theta(config), config.rms_norm_eps
    allowed = torch.ones(pos, pos, dtype=torch.bool).tril()  # (q_pos, k_pos): causal
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, None, :]  # (batch, 1, q_pos, k_pos)

    def split(t: Tensor, n: int) -> Tensor:  # (batch, pos, n * d_head) -> (batch, n, pos, d_head)
        return t.view(batch, pos, n, -1).transpose(1, 2)

    x = state["model.embed_tokens.weight"][input_ids]  # (batch, pos, d_model)
    attentions = []
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        h = rms_norm(x, state[f"{p}input_layernorm.weight"], eps)
        q = rotate(split(_linear(state, f"{p}self_attn.q_proj", h), heads), theta)
        k = rotate(split(_linear(state, f"{p}self_attn.k_proj", h), kv_heads), theta)
        v = split(_linear(state, f"{p}self_attn.v_proj", h), kv_heads)
        group = heads // kv_heads  # query heads per K/V head: K/V head j serves j*group..
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out, weights = attention(q, k, v, allowed)  # (batch, head, q_pos, d_head)
        out = out.transpose(1, 2).reshape(batch, pos, -1)  # (batch, q_pos, head * d_head)
        x = x + _linear(state, f"{p}self_attn.o_proj", out)
        h = rms_norm(x, state[f"{p}post_attention_layernorm.weight"], eps)
        gate, up = _linear(state, f"{p}mlp.gate_proj", h), _linear(state, f"{p}mlp.up_proj", h)
        x = x + _linear(state, f"{p}mlp.down_proj", F.silu(gate) * up)
        attentions.append(weights)
    head = state.get("lm_head.weight", state["model.embed_tokens.weight"])
    logits = F.linear(rms_norm(x, state["model.norm.weight"], eps), head)
    return LlamaOutput(logits=logits, attentions=attentions)

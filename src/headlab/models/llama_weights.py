"""Map the tensors of a GGUF or a Hugging Face checkpoint onto headlab's LlamaDecoder.

headlab packs W_Q, W_K, W_V of a layer into ``in_proj_weight`` (rows: H*D of Q, then G*D of K,
then G*D of V), as torch.nn.MultiheadAttention does. Every expected tensor must be present with
the shape the config implies; ValueError names the file and the tensor otherwise.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from headlab.models.llama_config import LlamaConfig

GGUF_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_output.weight": "attention.out_proj.weight",
}
HF_LAYER = {
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.gate_proj.weight": "mlp.gate_proj.weight",
    "mlp.up_proj.weight": "mlp.up_proj.weight",
    "mlp.down_proj.weight": "mlp.down_proj.weight",
    "self_attn.o_proj.weight": "attention.out_proj.weight",
}


def _take(tensors: dict[str, Tensor], name: str, where: Path) -> Tensor:
    if name not in tensors:
        raise ValueError(f"{where}: tensor {name!r} is missing")
    tensor = tensors[name].to(torch.float32)
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{where}: tensor {name!r} holds NaN or infinite values")
    return tensor


def _layer_state(
    tensors: dict[str, Tensor],
    config: LlamaConfig,
    where: Path,
    prefix: str,
    names: dict[str, str],
    qkv: tuple[str, str, str],
    qkv_bias: tuple[str, str, str] | None,
) -> dict[str, Tensor]:
    state: dict[str, Tensor] = {}
    for theirs, ours in names.items():
        state[ours] = _take(tensors, prefix + theirs, where)
    q, k, v = (_take(tensors, prefix + name, where) for name in qkv)
    state["attention.in_proj_weight"] = torch.cat([q, k, v])
    if config.attention_bias:
        if qkv_bias is None:
            raise ValueError(f"{where}: this format has no attention biases")
        biases = [_take(tensors, prefix + name, where) for name in qkv_bias]
        state["attention.in_proj_bias"] = torch.cat(biases)
        state["attention.out_proj.bias"] = torch.zeros(config.hidden_size)
    return state


def gguf_state(tensors: dict[str, Tensor], config: LlamaConfig, where: Path) -> dict[str, Tensor]:
    """The LlamaDecoder state dict from GGUF tensor names (``blk.N.attn_q.weight``, ...)."""
    state = {
        "embed_tokens.weight": _take(tensors, "token_embd.weight", where),
        "norm.weight": _take(tensors, "output_norm.weight", where),
    }
    state["lm_head.weight"] = (
        _take(tensors, "output.weight", where)
        if "output.weight" in tensors
        else state["embed_tokens.weight"]
    )
    qkv = ("attn_q.weight", "attn_k.weight", "attn_v.weight")
    bias = ("attn_q.bias", "attn_k.bias", "attn_v.bias")
    for i in range(config.num_hidden_layers):
        layer = _layer_state(tensors, config, where, f"blk.{i}.", GGUF_LAYER, qkv, bias)
        state.update({f"layers.{i}.{k}": v for k, v in layer.items()})
    return state


def hf_state(tensors: dict[str, Tensor], config: LlamaConfig, where: Path) -> dict[str, Tensor]:
    """The LlamaDecoder state dict from Hugging Face names (``model.layers.N.self_attn...``)."""
    state = {
        "embed_tokens.weight": _take(tensors, "model.embed_tokens.weight", where),
        "norm.weight": _take(tensors, "model.norm.weight", where),
    }
    state["lm_head.weight"] = (
        state["embed_tokens.weight"]
        if config.tie_word_embeddings or "lm_head.weight" not in tensors
        else _take(tensors, "lm_head.weight", where)
    )
    qkv = tuple(f"self_attn.{p}_proj.weight" for p in "qkv")
    bias = tuple(f"self_attn.{p}_proj.bias" for p in "qkv")
    for i in range(config.num_hidden_layers):
        layer = _layer_state(tensors, config, where, f"model.layers.{i}.", HF_LAYER, qkv, bias)
        state.update({f"layers.{i}.{k}": v for k, v in layer.items()})
    return state


def load_state(model: torch.nn.Module, state: dict[str, Tensor], where: Path) -> None:
    """Copy ``state`` into ``model``; ValueError naming the tensor on a shape mismatch."""
    own = model.state_dict()
    for name, tensor in state.items():
        if name not in own:
            raise ValueError(f"{where}: unexpected tensor for {name!r}")
        if own[name].shape != tensor.shape:
            raise ValueError(
                f"{where}: tensor for {name!r} has shape {tuple(tensor.shape)}, the config "
                f"implies {tuple(own[name].shape)}"
            )
    missing = [n for n in own if n not in state]
    if missing:
        raise ValueError(f"{where}: no tensor for {missing[0]!r}")
    with torch.no_grad():
        for name, param in model.state_dict(keep_vars=True).items():
            param.copy_(state[name])

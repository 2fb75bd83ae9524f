"""Map the tensors of a Hugging Face checkpoint (a transformers state_dict) onto headlab's
reference LlamaDecoder.

headlab packs W_Q, W_K, W_V of a layer into ``in_proj_weight`` (rows: H*D of Q, then G*D of K,
then G*D of V), as torch.nn.MultiheadAttention does. Every expected tensor must be present with
the shape the config implies (``expected_tensors``, checked before anything is read or built);
ValueError names the file, the tensor and the config fields otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from headlab.models.llama_config import LlamaConfig

HF_LAYER = {
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.gate_proj.weight": "mlp.gate_proj.weight",
    "mlp.up_proj.weight": "mlp.up_proj.weight",
    "mlp.down_proj.weight": "mlp.down_proj.weight",
    "self_attn.o_proj.weight": "attention.out_proj.weight",
}


@dataclass(frozen=True)
class Layout:
    """How a format names a decoder's tensors: the global ones, a layer's prefix (``{}`` is the
    layer index) and its tensors (theirs -> LlamaDecoder's), W_Q/W_K/W_V and their biases."""

    embed: str
    norm: str
    lm_head: str
    layer: str
    names: dict[str, str]
    qkv: tuple[str, str, str]
    qkv_bias: tuple[str, str, str]


HF = Layout(
    "model.embed_tokens.weight",
    "model.norm.weight",
    "lm_head.weight",
    "model.layers.{}.",
    HF_LAYER,
    tuple(f"self_attn.{p}_proj.weight" for p in "qkv"),  # type: ignore[arg-type]
    tuple(f"self_attn.{p}_proj.bias" for p in "qkv"),  # type: ignore[arg-type]
)


def expected_tensors(
    config: LlamaConfig, layout: Layout, names: Mapping[str, str] | None = None
) -> Iterator[tuple[str, tuple[int, ...], str]]:
    """(tensor name in the file, shape, the config fields that set it as ``names`` spells
    them), layer by layer. The output projection is expected only when the embeddings are not
    tied."""
    names = names or {}

    def sizes(*fields: str) -> str:
        return ", ".join(f"{names.get(f, f)}={getattr(config, f)}" for f in fields)

    h, i = config.hidden_size, config.intermediate_size
    q = config.num_attention_heads * config.head_dim
    kv = config.num_key_value_heads * config.head_dim
    width = ((h,), sizes("hidden_size"))
    embed = ((config.vocab_size, h), sizes("vocab_size", "hidden_size"))
    yield layout.embed, *embed
    yield layout.norm, *width
    if not config.tie_word_embeddings:
        yield layout.lm_head, *embed
    query = sizes("num_attention_heads", "head_dim", "hidden_size")
    key_value = sizes("num_key_value_heads", "head_dim", "hidden_size")
    ffn = sizes("intermediate_size", "hidden_size")
    shapes = {
        "input_layernorm.weight": width,
        "post_attention_layernorm.weight": width,
        "mlp.gate_proj.weight": ((i, h), ffn),
        "mlp.up_proj.weight": ((i, h), ffn),
        "mlp.down_proj.weight": ((h, i), ffn),
        "attention.out_proj.weight": ((h, q), query),
    }
    theirs = {ours: name for name, ours in layout.names.items()}
    qkv = [((q, h), query), ((kv, h), key_value), ((kv, h), key_value)]
    bias = [((q,), query), ((kv,), key_value), ((kv,), key_value)]
    for layer in range(config.num_hidden_layers):
        prefix = layout.layer.format(layer)
        for name, shape in zip(layout.qkv, qkv, strict=True):
            yield prefix + name, *shape
        if config.attention_bias:
            for name, shape in zip(layout.qkv_bias, bias, strict=True):
                yield prefix + name, *shape
        for ours, shape in shapes.items():
            yield prefix + theirs[ours], *shape


def decoder_state(
    read: Callable[[list[str]], dict[str, Tensor]], config: LlamaConfig, layout: Layout
) -> dict[str, Tensor]:
    """The LlamaDecoder state dict, from ``read(names)`` (the file's tensors by name, float32;
    check ``expected_tensors`` first: this assumes every one is there)."""
    tensors = read([name for name, _, _ in expected_tensors(config, layout)])
    state = {"embed_tokens.weight": tensors[layout.embed], "norm.weight": tensors[layout.norm]}
    state["lm_head.weight"] = tensors.get(layout.lm_head, state["embed_tokens.weight"])
    for layer in range(config.num_hidden_layers):
        prefix, ours = layout.layer.format(layer), f"layers.{layer}."
        for theirs, name in layout.names.items():
            state[ours + name] = tensors.pop(prefix + theirs)
        q, k, v = (tensors.pop(prefix + name) for name in layout.qkv)
        state[ours + "attention.in_proj_weight"] = torch.cat([q, k, v])
        if config.attention_bias:
            biases = [tensors.pop(prefix + name) for name in layout.qkv_bias]
            state[ours + "attention.in_proj_bias"] = torch.cat(biases)
            state[ours + "attention.out_proj.bias"] = torch.zeros(config.hidden_size)
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

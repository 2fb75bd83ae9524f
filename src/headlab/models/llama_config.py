"""The configuration of a Llama-family decoder (Llama, Mistral, Qwen2), from a GGUF or config.json.

Every problem raises one ValueError naming the file and what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from headlab.limits import check_finite, check_fits, check_int

FAMILIES = ("llama", "mistral", "qwen2")


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes and constants of a Llama-family decoder (names as in transformers' LlamaConfig)."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    attention_bias: bool = False  # Qwen2: biases on q, k, v (never on the output projection)
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    model_type: str = "llama"

    def parameters(self) -> int:
        """Parameter count (embeddings counted once when tied)."""
        h, i = self.hidden_size, self.intermediate_size
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h + (q + 2 * kv if self.attention_bias else 0)
        layer = attention + 3 * h * i + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_hidden_layers * layer + h


def checked(config: LlamaConfig, where: str | Path) -> LlamaConfig:
    """``config`` if its numbers are in range and it fits in memory; ValueError naming ``where``."""
    try:
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "max_position_embeddings",
        ):
            check_int(name, getattr(config, name))
        check_finite("rope_theta", config.rope_theta, positive=True)
        check_finite("rms_norm_eps", config.rms_norm_eps, positive=True)
        if config.num_attention_heads % config.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={config.num_attention_heads} is not divisible by "
                f"num_key_value_heads={config.num_key_value_heads}"
            )
        if config.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary positions, got {config.head_dim}")
        check_fits("a decoder of these sizes", 4 * config.parameters())
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return config


def from_gguf_metadata(metadata: dict, where: str | Path) -> LlamaConfig:
    """A LlamaConfig from the ``llama.*`` keys of a GGUF (vocab size from the token list)."""

    def get(key: str, default: object = None) -> object:
        value = metadata.get(f"llama.{key}", default)
        if value is None:
            raise ValueError(f"{where}: metadata llama.{key} is missing")
        return value

    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = int(get("vocab_size", len(tokens) if tokens is not None else None))
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=int(get("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(get("rope.dimension_count", hidden // max(heads, 1))),
        intermediate_size=int(get("feed_forward_length")),
        max_position_embeddings=int(get("context_length")),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        tie_word_embeddings=True,  # decided by the reader: no output.weight tensor means tied
        bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=metadata.get("tokenizer.ggml.eos_token_id"),
    )
    return config


def read_hf_config(path: Path) -> LlamaConfig:
    """Parse and check a transformers ``config.json`` of model_type llama, mistral or qwen2."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    family = data.get("model_type")
    if family not in FAMILIES:
        raise ValueError(f"{path}: model_type must be one of {', '.join(FAMILIES)}, got {family!r}")
    rope_scaling = data.get("rope_scaling") or (data.get("rope_parameters") or {})
    kind = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if kind not in ("default", None):
        raise ValueError(f"{path}: only plain rotary positions are supported, got rope {kind!r}")
    if family == "mistral" and data.get("sliding_window") not in (None, 0):
        window = int(data["sliding_window"])
        if window < int(data.get("max_position_embeddings", 0)):
            raise ValueError(f"{path}: a sliding window ({window}) is not supported")

    def need(name: str) -> object:
        if name not in data or data[name] is None:
            raise ValueError(f"{path}: missing {name!r}")
        return data[name]

    heads = int(need("num_attention_heads"))
    hidden = int(need("hidden_size"))
    if hidden % heads and "head_dim" not in data:
        raise ValueError(
            f"{path}: hidden_size={hidden} is not divisible by num_attention_heads={heads}"
        )
    theta = data.get("rope_theta", rope_scaling.get("rope_theta", 10000.0))
    eos = data.get("eos_token_id")
    config = LlamaConfig(
        vocab_size=int(need("vocab_size")),
        hidden_size=hidden,
        num_hidden_layers=int(need("num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=int(data.get("num_key_value_heads") or heads),
        head_dim=int(data.get("head_dim") or hidden // heads),
        intermediate_size=int(need("intermediate_size")),
        max_position_embeddings=int(data.get("max_position_embeddings", 2048)),
        rope_theta=float(theta),
        rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
        attention_bias=bool(data.get("attention_bias", family == "qwen2")),
        bos_token_id=data.get("bos_token_id"),
        eos_token_id=eos[0] if isinstance(eos, list) and eos else eos,
        model_type=family,
    )
    return checked(config, path)

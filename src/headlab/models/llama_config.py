"""The configuration of the reference Llama-family decoder (Llama, Mistral, Qwen2): config.json.

Every problem raises one ValueError naming the file and what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headlab.limits import check_finite, check_int
from headlab.models.fields import FileFields, Unsupported, read_json

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


def checked(
    config: LlamaConfig, where: str | Path, names: dict[str, str] | None = None
) -> LlamaConfig:
    """``config`` if its numbers are in range and its head sizes agree; ValueError naming
    ``where`` and the fields (as ``names`` spells them)."""
    names = names or {}

    def name(field: str) -> str:
        return names.get(field, field)

    try:
        for field in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
        ):
            check_int(name(field), getattr(config, field))
        check_int(name("max_position_embeddings"), config.max_position_embeddings, low=2)
        check_finite(name("rope_theta"), config.rope_theta, positive=True)
        check_finite(name("rms_norm_eps"), config.rms_norm_eps, positive=True)
        if config.num_attention_heads % config.num_key_value_heads:
            raise ValueError(
                f"{name('num_attention_heads')}={config.num_attention_heads} is not divisible by "
                f"{name('num_key_value_heads')}={config.num_key_value_heads}"
            )
        if config.head_dim % 2:
            raise ValueError(
                f"{name('head_dim')} must be even for rotary positions, got {config.head_dim}"
            )
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return config


def _head_dim(fields: FileFields, heads: int, hidden: int) -> int:
    """The ``head_dim`` field, or hidden / heads when there is none (then it must divide)."""
    if fields.has("head_dim"):
        return fields.int("head_dim")
    if hidden % heads:
        raise ValueError(
            f"{fields.where}: {fields.name('hidden_size')}={hidden} is not divisible by "
            f"{fields.name('num_attention_heads')}={heads}"
        )
    return hidden // heads


def _eos(fields: FileFields) -> int | None:
    """``eos_token_id``: an id, or a list of ids (the first is the one generation stops at)."""
    value = fields.data.get("eos_token_id")
    if isinstance(value, list) and value:
        return FileFields({"eos_token_id": value[0]}, fields.where).optional_int("eos_token_id")
    return fields.optional_int("eos_token_id")


def read_hf_config(path: Path) -> LlamaConfig:
    """Parse and check a transformers ``config.json`` of model_type llama, mistral or qwen2.

    ValueError naming the file and the field for a missing, ill-typed or out-of-range field;
    ``Unsupported`` for what headlab's decoder does not run (another family, scaled rotary
    positions, a sliding window shorter than the context).
    """
    data = read_json(path)
    fields = FileFields(data, path)
    family = data.get("model_type")
    if family not in FAMILIES:
        raise Unsupported(
            f"{path}: model_type must be one of {', '.join(FAMILIES)}, got {family!r}"
        )
    rope_key = "rope_scaling" if fields.has("rope_scaling") else "rope_parameters"
    rope = FileFields(fields.object(rope_key), path, prefix=f"{rope_key}.")
    kind = rope.str("rope_type", rope.data.get("type", "default"))
    if kind != "default":
        raise Unsupported(f"{path}: only plain rotary positions are supported, got rope {kind!r}")
    positions = fields.int("max_position_embeddings", 2048, low=2)
    if family == "mistral" and fields.data.get("sliding_window") not in (None, 0):
        window = fields.int("sliding_window")
        if window < positions:
            raise Unsupported(f"{path}: a sliding window ({window}) is not supported")
    heads = fields.int("num_attention_heads")
    hidden = fields.int("hidden_size")
    config = LlamaConfig(
        vocab_size=fields.int("vocab_size"),
        hidden_size=hidden,
        num_hidden_layers=fields.int("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=fields.int("num_key_value_heads", heads),
        head_dim=_head_dim(fields, heads, hidden),
        intermediate_size=fields.int("intermediate_size"),
        max_position_embeddings=positions,
        rope_theta=fields.number("rope_theta", rope.number("rope_theta", 10000.0)),
        rms_norm_eps=fields.number("rms_norm_eps", 1e-6),
        tie_word_embeddings=fields.bool("tie_word_embeddings", False),
        attention_bias=fields.bool("attention_bias", family == "qwen2"),
        bos_token_id=fields.optional_int("bos_token_id"),
        eos_token_id=_eos(fields),
        model_type=family,
    )
    return checked(config, path)

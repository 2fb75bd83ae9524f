"""A checkpoint's ``config.json`` checked field by field before transformers reads it.

transformers turns a malformed field into whatever its code meets first: ``num_attention_heads:
0`` is a ZeroDivisionError in the config class, a negative count a RuntimeError from
``torch.empty`` while the model is built, ``"dtype": "float128"`` an AttributeError from torch, a
rope ``factor`` of ``"big"`` a TypeError inside the rotary embedding, a ``pad_token_id`` beyond
the vocabulary a torch assertion while the embedding is built, and a ``layer_norm_eps`` of NaN
loads and makes every statistic NaN. ``check_config_fields`` refuses each first, in one line
naming the file and the field (``text_config.`` for a nested text model's). It checks the fields
whose meaning every family shares; anything else that transformers still cannot read is one
line too (checkpoint.py, loader.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

#: Sizes and counts: an integer >= 1 when present (null: the family's default).
SIZES = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
    "n_embd",
    "n_layer",
    "n_head",
    "n_inner",
    "n_positions",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
)
#: The dtype fields a config may hold (transformers 5 writes ``dtype``, older ``torch_dtype``).
DTYPES = ("dtype", "torch_dtype")
#: The rotary parameters that are numbers (``short_factor``/``long_factor``: lists of numbers).
ROPE_NUMBERS = (
    "factor",
    "rope_theta",
    "attention_factor",
    "beta_fast",
    "beta_slow",
    "original_max_position_embeddings",
    "low_freq_factor",
    "high_freq_factor",
    "partial_rotary_factor",
    "mscale",
    "mscale_all_dim",
)
ROPE_LISTS = ("short_factor", "long_factor")
#: The norms' epsilon under the names transformers' configs give it: a finite number >= 0 (NaN
#: made every statistic NaN; a negative one can take the root of a negative variance).
EPSILONS = ("layer_norm_eps", "rms_norm_eps", "layer_norm_epsilon", "norm_eps")
ROPES = ("rope_parameters", "rope_scaling")


def _float_dtypes() -> list[str]:
    return sorted(
        name
        for name in ("float16", "bfloat16", "float32", "float64")
        if isinstance(getattr(torch, name, None), torch.dtype)
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_sizes(config: dict, where: str, prefix: str) -> None:
    for field in SIZES:
        value = config.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{where}: {prefix}{field} must be an integer >= 1, got {value!r}")


def _check_dtype(config: dict, where: str, prefix: str) -> None:
    for field in DTYPES:
        value = config.get(field)
        if value is None or value == "auto":
            continue
        allowed = _float_dtypes()
        if not isinstance(value, str) or value.removeprefix("torch.") not in allowed:
            raise ValueError(
                f"{where}: {prefix}{field} must be one of {', '.join(allowed)}, got {value!r}"
            )


def _check_epsilons(config: dict, where: str, prefix: str) -> None:
    for field in EPSILONS:
        value = config.get(field)
        if value is not None and not (_is_number(value) and value >= 0):
            raise ValueError(
                f"{where}: {prefix}{field} must be a finite number >= 0, got {value!r}"
            )


def _check_pad_token(config: dict, where: str, prefix: str) -> None:
    """pad_token_id becomes the embedding's ``padding_idx``: torch asserts it lies within the
    vocabulary (-vocab_size to vocab_size - 1, negative counting from the end) while the model is
    built."""
    value = config.get("pad_token_id")
    if value is None:
        return
    vocab = config.get("vocab_size")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}: {prefix}pad_token_id must be a token id, got {value!r}")
    if isinstance(vocab, int) and not isinstance(vocab, bool) and not -vocab <= value < vocab:
        raise ValueError(
            f"{where}: {prefix}pad_token_id must be a token id below {prefix}vocab_size={vocab} "
            f"(0 to {vocab - 1}), got {value!r}"
        )


def _check_rope(rope: object, where: str, field: str) -> None:
    if rope is None:
        return
    if not isinstance(rope, dict):
        raise ValueError(f"{where}: {field} must be a JSON object, got {rope!r}")
    if rope and all(isinstance(v, dict) for v in rope.values()):  # one per layer type
        for layer_type, parameters in rope.items():
            _check_rope(parameters, where, f"{field}.{layer_type}")
        return
    kind = rope.get("rope_type", rope.get("type"))
    if kind is not None and not isinstance(kind, str):
        raise ValueError(f"{where}: {field}.rope_type must be a string, got {kind!r}")
    for name in ROPE_NUMBERS:
        value = rope.get(name)
        if value is not None and not _is_number(value):
            raise ValueError(f"{where}: {field}.{name} must be a finite number, got {value!r}")
    for name in ("factor", "rope_theta"):
        value = rope.get(name)
        if value is not None and value <= 0:
            raise ValueError(f"{where}: {field}.{name} must be > 0, got {value!r}")
    for name in ROPE_LISTS:
        values = rope.get(name)
        if values is not None and not (
            isinstance(values, list) and all(_is_number(v) for v in values)
        ):
            raise ValueError(f"{where}: {field}.{name} must be a list of numbers, got {values!r}")


def _reads_field(model_type: str, field: str) -> bool:
    """Whether transformers' modelling code of ``model_type`` mentions ``field`` at all (read from
    its source file, not imported); True where that code cannot be found (not ours to judge)."""
    import importlib.util

    name = model_type.replace("-", "_")
    try:
        spec = importlib.util.find_spec(f"transformers.models.{name}.modeling_{name}")
    except (ImportError, ValueError):
        return True
    if spec is None or spec.origin is None:
        return True
    return field in Path(spec.origin).read_text(encoding="utf-8")


def _check_positions(config: dict, where: str, prefix: str) -> None:
    """A checkpoint asking for positions other than absolute ones (BERT's ``relative_key``) from a
    family whose code in this transformers no longer reads the field would silently run with
    absolute positions only: refused, naming the field."""
    kind = config.get("position_embedding_type")
    model_type = config.get("model_type")
    if kind in (None, "absolute") or not isinstance(model_type, str):
        return
    if not _reads_field(model_type, "position_embedding_type"):
        import transformers

        raise ValueError(
            f"{where}: {prefix}position_embedding_type {kind!r} is not run by transformers "
            f"{transformers.__version__}'s {model_type} (absolute positions only): its results "
            "would not be this checkpoint's"
        )


def check_config_fields(config: dict, path: Path | str) -> None:
    """ValueError naming ``path`` and the field for a size that is not an integer >= 1, a dtype
    that is not a floating torch dtype, a norm's epsilon that is not a finite number >= 0, a
    pad_token_id outside the vocabulary, rotary parameters that are not numbers, or positions
    the family's code does not read (``position_embedding_type``), in
    ``config`` (config.json's object) and its ``text_config``."""
    where = str(path)
    parts = [(config, "")]
    if isinstance(config.get("text_config"), dict):
        parts.append((config["text_config"], "text_config."))
    for part, prefix in parts:
        _check_sizes(part, where, prefix)
        _check_dtype(part, where, prefix)
        _check_epsilons(part, where, prefix)
        _check_pad_token(part, where, prefix)
        _check_positions(part, where, prefix)
        for field in ROPES:
            if field in part:
                _check_rope(part[field], where, prefix + field)


def declared_heads(config: dict) -> int | None:
    """The query heads of every layer together (layers x heads) that config.json's object
    ``config`` declares (its ``text_config``'s when nested), or None when it does not say both
    as integers >= 1."""
    part = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers = next((part[f] for f in ("num_hidden_layers", "n_layer") if f in part), None)
    heads = next((part[f] for f in ("num_attention_heads", "n_head") if f in part), None)
    counts = (layers, heads)
    if all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in counts):
        return layers * heads
    return None


def max_positions_of(config) -> int:
    """The positions a model of ``config`` has (2**20 when its config names none: no limit)."""
    return int(getattr(config, "max_position_embeddings", None) or 2**20)

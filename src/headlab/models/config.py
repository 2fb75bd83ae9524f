"""The configuration of a BERT-family encoder and its sentence pooling, read and checked.

A model directory holds ``config.json`` (the transformers BERT config), ``model.safetensors`` and
``tokenizer.json``; optionally the sentence-transformers files ``modules.json``,
``sentence_bert_config.json`` and ``1_Pooling/config.json`` that say how token states become one
sentence embedding. Every problem raises one error naming the file and what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from headlab.limits import check_finite, check_fits, check_int

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
ACTIVATIONS = ("gelu", "gelu_new", "relu")
POOLING_MODES = ("mean", "cls", "max")


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT encoder (names as in transformers' BertConfig)."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str
    pad_token_id: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class PoolingConfig:
    """How token states become a sentence embedding (sentence-transformers' pipeline).

    mode: "mean" (over non-padding tokens), "cls" or "max"; normalize: divide by the l2 norm;
    max_seq_length: tokens kept per text (longer texts are truncated, [SEP] kept).
    """

    mode: str = "mean"
    normalize: bool = False
    max_seq_length: int = 512


def _read_json(path: Path, expected: type = dict) -> dict | list:
    """The JSON document at ``path``, which must be a ``expected`` (dict or list)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: expected UTF-8 JSON, got undecodable bytes") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(data, expected):
        name = "a JSON object" if expected is dict else "a JSON list"
        raise ValueError(f"{path}: expected {name}, got {type(data).__name__}")
    return data


def check_model_dir(model_dir: Path) -> None:
    """Raise FileNotFoundError naming the directory and the first missing required file."""
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory {model_dir} does not exist or is not a folder")
    for name in REQUIRED_FILES:
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"model directory {model_dir}: {name} is missing")


def _field(data: dict, path: Path, name: str, kind: type, default: object = None) -> object:
    value = data.get(name, default)
    if value is None:
        raise ValueError(f"{path}: missing {name!r}, expected {kind.__name__}")
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise ValueError(f"{path}: {name!r} must be {kind.__name__}, got {value!r}")
    if kind is int:
        try:
            check_int(name, value, low=0 if name == "pad_token_id" else 1)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
    if kind is float:
        try:
            check_finite(name, value, positive=True)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
    return value


def read_bert_config(path: Path) -> BertConfig:
    """Parse and check a transformers ``config.json`` of a BERT model.

    Raises ValueError (naming ``path``) for a model_type other than "bert", missing or
    ill-typed sizes, hidden_size not divisible by num_attention_heads, an unsupported activation
    or position embedding type.
    """
    data = _read_json(path)
    model_type = data.get("model_type")
    if model_type != "bert":
        raise ValueError(
            f"{path}: model_type must be 'bert' (a BERT-like encoder), got {model_type!r}"
        )
    position = data.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise ValueError(f"{path}: position_embedding_type must be 'absolute', got {position!r}")
    if data.get("is_decoder", False) or data.get("add_cross_attention", False):
        raise ValueError(f"{path}: expected an encoder, got is_decoder/add_cross_attention true")
    config = BertConfig(
        vocab_size=_field(data, path, "vocab_size", int),
        hidden_size=_field(data, path, "hidden_size", int),
        num_hidden_layers=_field(data, path, "num_hidden_layers", int),
        num_attention_heads=_field(data, path, "num_attention_heads", int),
        intermediate_size=_field(data, path, "intermediate_size", int),
        max_position_embeddings=_field(data, path, "max_position_embeddings", int),
        type_vocab_size=_field(data, path, "type_vocab_size", int, 2),
        layer_norm_eps=float(_field(data, path, "layer_norm_eps", float, 1e-12)),
        hidden_act=_field(data, path, "hidden_act", str, "gelu"),
        pad_token_id=_field(data, path, "pad_token_id", int, 0),
    )
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"{path}: hidden_size={config.hidden_size} is not divisible by "
            f"num_attention_heads={config.num_attention_heads}"
        )
    if config.pad_token_id >= config.vocab_size:
        raise ValueError(
            f"{path}: pad_token_id must be below vocab_size={config.vocab_size}, "
            f"got {config.pad_token_id}"
        )
    check_fits(f"{path}: a BERT of these sizes", 4 * bert_parameters(config))
    if config.hidden_act not in ACTIVATIONS:
        raise ValueError(
            f"{path}: hidden_act must be one of {ACTIVATIONS}, got {config.hidden_act!r}"
        )
    return config


def bert_parameters(config: BertConfig) -> int:
    """The parameter count of a BERT of ``config``'s sizes (embeddings, layers; no pooler)."""
    h, i = config.hidden_size, config.intermediate_size
    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * h
    layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
    return embeddings + 2 * h + config.num_hidden_layers * layer


def read_pooling_config(model_dir: Path, max_positions: int) -> PoolingConfig:
    """The sentence-transformers pooling of ``model_dir``; mean pooling, no normalisation and
    ``max_positions`` tokens when the directory has no sentence-transformers files."""
    mode, normalize, max_len = "mean", False, max_positions
    modules_path = model_dir / "modules.json"
    if modules_path.is_file():
        modules = _read_json(modules_path, list)
        types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
        normalize = any(t.endswith("models.Normalize") for t in types)
    pooling_path = model_dir / "1_Pooling" / "config.json"
    if pooling_path.is_file():
        pooling = _read_json(pooling_path)
        flags = {
            "mean": pooling.get("pooling_mode_mean_tokens", False),
            "cls": pooling.get("pooling_mode_cls_token", False),
            "max": pooling.get("pooling_mode_max_tokens", False),
        }
        chosen = [name for name, on in flags.items() if on]
        others = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
        if len(chosen) != 1 or len(others) != 1:
            raise ValueError(
                f"{pooling_path}: expected exactly one of pooling_mode_mean_tokens, "
                f"pooling_mode_cls_token, pooling_mode_max_tokens, got {others}"
            )
        mode = chosen[0]
    st_path = model_dir / "sentence_bert_config.json"
    if st_path.is_file():
        st = _read_json(st_path)
        max_len = st.get("max_seq_length", max_len)
        if (
            not isinstance(max_len, int)
            or isinstance(max_len, bool)
            or not (2 <= max_len <= max_positions)
        ):
            raise ValueError(
                f"{st_path}: max_seq_length must be in [2, {max_positions}], got {max_len}"
            )
    return PoolingConfig(mode=mode, normalize=normalize, max_seq_length=max_len)

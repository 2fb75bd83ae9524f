"""The configuration of a BERT-family encoder and its sentence pooling, read and checked.

A model directory holds ``config.json`` (the transformers BERT config), ``model.safetensors`` and
``tokenizer.json``; optionally the sentence-transformers files ``modules.json``,
``sentence_bert_config.json`` and ``1_Pooling/config.json`` that say how token states become one
sentence embedding. Every problem raises one error naming the file and what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headlab.models.fields import FileFields, Unsupported, read_json
from headlab.results.input_files import check_model_folder

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


def check_model_dir(model_dir: Path) -> None:
    """Raise FileNotFoundError naming the directory and the first missing required file."""
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory {model_dir} does not exist or is not a folder")
    check_model_folder(model_dir, "model directory")  # a FIFO is named, not taken as missing
    for name in REQUIRED_FILES:
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"model directory {model_dir}: {name} is missing")


def read_bert_config(path: Path) -> BertConfig:
    """Parse and check a transformers ``config.json`` of a BERT model.

    Raises ValueError (naming ``path``) for a model_type other than "bert", missing or
    ill-typed sizes, hidden_size not divisible by num_attention_heads, an unsupported activation
    or position embedding type.
    """
    data = read_json(path)
    model_type = data.get("model_type")
    if model_type != "bert":
        raise ValueError(
            f"{path}: model_type must be 'bert' (a BERT-like encoder), got {model_type!r}"
        )
    position = data.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise Unsupported(f"{path}: position_embedding_type must be 'absolute', got {position!r}")
    if data.get("is_decoder", False) or data.get("add_cross_attention", False):
        raise ValueError(f"{path}: expected an encoder, got is_decoder/add_cross_attention true")
    fields = FileFields(data, path)
    config = BertConfig(
        vocab_size=fields.int("vocab_size"),
        hidden_size=fields.int("hidden_size"),
        num_hidden_layers=fields.int("num_hidden_layers"),
        num_attention_heads=fields.int("num_attention_heads"),
        intermediate_size=fields.int("intermediate_size"),
        # [CLS] and [SEP] take two positions: fewer leaves no room for a text
        max_position_embeddings=fields.int("max_position_embeddings", low=2),
        type_vocab_size=fields.int("type_vocab_size", 2),
        layer_norm_eps=fields.number("layer_norm_eps", 1e-12),
        hidden_act=fields.str("hidden_act", "gelu"),
        pad_token_id=fields.int("pad_token_id", 0, low=0),
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
    if config.hidden_act not in ACTIVATIONS:
        raise Unsupported(
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
        modules = read_json(modules_path, list)
        types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
        normalize = any(t.endswith("models.Normalize") for t in types)
    pooling_path = model_dir / "1_Pooling" / "config.json"
    if pooling_path.is_file():
        pooling = read_json(pooling_path)
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
        st = read_json(st_path)
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

"""Read a BERT ``model.safetensors`` and map its tensors onto headlab's encoder.

BERT keeps separate query, key and value projections; headlab's MultiHeadAttention packs them
into ``in_proj_weight`` (3E, E) = [W_Q; W_K; W_V] and ``in_proj_bias``, and calls the attention
output projection ``out_proj``. Every expected tensor is checked for presence and shape first,
so a wrong file fails with one error naming it, the tensor and the two shapes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from headlab.models.config import BertConfig


def expected_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """BERT tensor name (without a ``bert.`` prefix) -> shape required by ``config``."""
    e, f = config.hidden_size, config.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocab_size, e),
        "embeddings.position_embeddings.weight": (config.max_position_embeddings, e),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, e),
        "embeddings.LayerNorm.weight": (e,),
        "embeddings.LayerNorm.bias": (e,),
    }
    for i in range(config.num_hidden_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            shapes[f"{p}attention.self.{name}.weight"] = (e, e)
            shapes[f"{p}attention.self.{name}.bias"] = (e,)
        shapes[f"{p}attention.output.dense.weight"] = (e, e)
        shapes[f"{p}attention.output.dense.bias"] = (e,)
        shapes[f"{p}attention.output.LayerNorm.weight"] = (e,)
        shapes[f"{p}attention.output.LayerNorm.bias"] = (e,)
        shapes[f"{p}intermediate.dense.weight"] = (f, e)
        shapes[f"{p}intermediate.dense.bias"] = (f,)
        shapes[f"{p}output.dense.weight"] = (e, f)
        shapes[f"{p}output.dense.bias"] = (e,)
        shapes[f"{p}output.LayerNorm.weight"] = (e,)
        shapes[f"{p}output.LayerNorm.bias"] = (e,)
    return shapes


def read_bert_tensors(path: Path, config: BertConfig) -> dict[str, Tensor]:
    """The tensors of ``path`` that ``config`` needs, as float32, keyed without ``bert.``.

    Raises ValueError naming ``path`` when the file is unreadable, a tensor is missing, a
    shape disagrees with config.json or a tensor holds NaN or infinity.
    """
    shapes = expected_shapes(config)
    try:
        with safe_open(str(path), framework="pt") as file:
            keys = set(file.keys())
            prefix = (
                "bert."
                if not keys & shapes.keys() and any(k.startswith("bert.") for k in keys)
                else ""
            )
            tensors = {}
            for name, shape in shapes.items():
                key = prefix + name
                if key not in keys:
                    raise ValueError(f"{path}: tensor {key!r} is missing")
                got = tuple(file.get_slice(key).get_shape())
                if got != shape:
                    raise ValueError(
                        f"{path}: tensor {key!r} has shape {got}, config.json says {shape}"
                    )
                tensor = file.get_tensor(key).to(torch.float32)
                if not torch.isfinite(tensor).all():
                    bad = int((~torch.isfinite(tensor)).sum())
                    raise ValueError(
                        f"{path}: tensor {key!r} holds {bad} NaN or infinite values; "
                        "expected finite weights"
                    )
                tensors[name] = tensor
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path}: not a readable safetensors file ({error})") from None
    return tensors


def to_headlab_state(tensors: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """BERT names -> the state_dict keys of ``headlab.models.encoder.BertEncoder``."""
    state = {
        "embeddings.word.weight": tensors["embeddings.word_embeddings.weight"],
        "embeddings.position.weight": tensors["embeddings.position_embeddings.weight"],
        "embeddings.token_type.weight": tensors["embeddings.token_type_embeddings.weight"],
        "embeddings.norm.weight": tensors["embeddings.LayerNorm.weight"],
        "embeddings.norm.bias": tensors["embeddings.LayerNorm.bias"],
    }
    for i in range(config.num_hidden_layers):
        p, q = f"encoder.layer.{i}.", f"layers.{i}."
        qkv = [f"{p}attention.self.{n}" for n in ("query", "key", "value")]
        state[f"{q}attention.in_proj_weight"] = torch.cat([tensors[f"{n}.weight"] for n in qkv])
        state[f"{q}attention.in_proj_bias"] = torch.cat([tensors[f"{n}.bias"] for n in qkv])
        for ours, theirs in (
            ("attention.out_proj", "attention.output.dense"),
            ("attention_norm", "attention.output.LayerNorm"),
            ("ffn_in", "intermediate.dense"),
            ("ffn_out", "output.dense"),
            ("ffn_norm", "output.LayerNorm"),
        ):
            state[f"{q}{ours}.weight"] = tensors[f"{p}{theirs}.weight"]
            state[f"{q}{ours}.bias"] = tensors[f"{p}{theirs}.bias"]
    return state

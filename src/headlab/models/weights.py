"""Read a BERT ``model.safetensors`` and map its tensors onto headlab's encoder.

BERT keeps separate query, key and value projections; headlab's MultiHeadAttention packs them
into ``in_proj_weight`` (3E, E) = [W_Q; W_K; W_V] and ``in_proj_bias``, and calls the attention
output projection ``out_proj``. Every expected tensor is checked for presence and shape first,
so a wrong file fails with one error naming it, the tensor and the two shapes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from headlab.models.config import BertConfig, bert_parameters
from headlab.models.weight_files import SafetensorsFiles, check_tensors


def expected_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """BERT tensor name (without a ``bert.`` prefix) -> shape required by ``config``."""
    return {name: shape for name, shape, _ in expected_tensors(config)}


def expected_tensors(config: BertConfig) -> Iterator[tuple[str, tuple[int, ...], str]]:
    """(BERT tensor name, shape, the config fields that set it), layer by layer."""
    e, f = config.hidden_size, config.intermediate_size
    width, hidden = (e,), "hidden_size"
    yield "embeddings.word_embeddings.weight", (config.vocab_size, e), "vocab_size, hidden_size"
    yield (
        "embeddings.position_embeddings.weight",
        (config.max_position_embeddings, e),
        "max_position_embeddings, hidden_size",
    )
    yield (
        "embeddings.token_type_embeddings.weight",
        (config.type_vocab_size, e),
        "type_vocab_size, hidden_size",
    )
    yield "embeddings.LayerNorm.weight", width, hidden
    yield "embeddings.LayerNorm.bias", width, hidden
    for i in range(config.num_hidden_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            yield f"{p}attention.self.{name}.weight", (e, e), hidden
            yield f"{p}attention.self.{name}.bias", width, hidden
        yield f"{p}attention.output.dense.weight", (e, e), hidden
        for name in ("dense.bias", "LayerNorm.weight", "LayerNorm.bias"):
            yield f"{p}attention.output.{name}", width, hidden
        yield f"{p}intermediate.dense.weight", (f, e), "intermediate_size, hidden_size"
        yield f"{p}intermediate.dense.bias", (f,), "intermediate_size"
        yield f"{p}output.dense.weight", (e, f), "hidden_size, intermediate_size"
        for name in ("dense.bias", "LayerNorm.weight", "LayerNorm.bias"):
            yield f"{p}output.{name}", width, hidden


def read_bert_tensors(path: Path, config: BertConfig) -> dict[str, Tensor]:
    """The tensors of ``path`` that ``config`` needs, as float32, keyed without ``bert.``.

    Raises ValueError naming ``path`` when the file is unreadable, a tensor is missing (saying
    when config.json declares more parameters than the file holds), a shape disagrees with
    config.json, the model would not fit in memory (all before any tensor is read) or a tensor
    holds NaN or infinity.
    """
    file = SafetensorsFiles([path])
    keys = file.shapes.keys()
    names = [name for name, _, _ in itertools.islice(expected_tensors(config), 5)]
    bert = not keys & set(names) and any(k.startswith("bert.") for k in keys)
    prefix = "bert." if bert else ""
    sizes = (
        f"num_hidden_layers={config.num_hidden_layers}, hidden_size={config.hidden_size}, "
        f"intermediate_size={config.intermediate_size}"
    )
    check_tensors(
        file.shapes,
        ((prefix + name, shape, fields) for name, shape, fields in expected_tensors(config)),
        declared=bert_parameters(config),
        where=path,
        config="config.json",
        sizes=sizes,
    )
    tensors = file.read(prefix + name for name, _, _ in expected_tensors(config))
    return {name[len(prefix) :]: tensor for name, tensor in tensors.items()}


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

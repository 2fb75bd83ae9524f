"""What weight files hold, read from their headers (tensor names and shapes, no data), so that a
loader can compare it with what a config declares before any weight is read.

A config (``config.json``, GGUF metadata) only declares sizes; a ten-kilobyte file can declare a
million layers. ``models/hf/loader.py`` checks the declared parameters against ``held_values``
of ``checkpoint_shapes`` before transformers builds the model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from safetensors import SafetensorError, safe_open

Shape = tuple[int, ...]


def held_values(shapes: Iterable[Shape]) -> int:
    """How many values tensors of these shapes hold."""
    return sum(math.prod(shape) for shape in shapes)


def safetensors_shapes(files: Iterable[Path]) -> dict[str, Shape]:
    """Tensor name -> shape from the headers of ``.safetensors`` files; ValueError naming the
    file when one is not a readable safetensors file."""
    shapes: dict[str, Shape] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    shapes[key] = tuple(handle.get_slice(key).get_shape())
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{file}: not a readable safetensors file ({error})") from None
    return shapes


def checkpoint_shapes(folder: Path, gguf_file: str | None = None) -> dict[str, Shape] | None:
    """Tensor name -> shape from the headers of a checkpoint's weights (its ``*.safetensors``,
    or the GGUF ``gguf_file`` in ``folder``); None when the folder holds no weights yet."""
    if gguf_file is not None:
        import gguf

        try:
            reader = gguf.GGUFReader(str(folder / gguf_file))
        except (ValueError, OSError, IndexError, KeyError, EOFError) as error:
            raise ValueError(f"{folder / gguf_file}: not a readable GGUF file ({error})") from None
        return {t.name: tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}
    files = sorted(folder.glob("*.safetensors"))
    return safetensors_shapes(files) if files else None

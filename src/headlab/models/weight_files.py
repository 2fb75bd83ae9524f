"""What weight files hold, read from their headers, checked before any model is built.

A config (``config.json``, GGUF metadata) only declares sizes; a ten-kilobyte file can declare a
million layers. So every loader compares what the config declares with what the weights file
really holds (tensor names and shapes from the safetensors or GGUF header, no data read): it
checks every tensor the config implies against the header (stopping at the first one the file
lacks, and saying when the config asks for more parameters than the file has values), then that
the model fits in memory; only then are weights read and the model built. ``check_tensors`` is
that check for every model source headlab reads itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from headlab.limits import check_fits

Shape = tuple[int, ...]
# Loading holds the weights read from the file (float32), the model's own copy and the packed
# Q/K/V at once: SmolLM2 (513 MiB of float32 parameters) grew the process by 1322 MiB, 2.6x.
LOAD_COPIES = 3


def held_values(shapes: Iterable[Shape]) -> int:
    """How many values tensors of these shapes hold."""
    return sum(math.prod(shape) for shape in shapes)


def check_tensors(
    found: Mapping[str, Shape], expected: Iterable[tuple[str, Shape, str]], *, declared: int,
    where: str | Path, config: str | Path, sizes: str,
) -> None:  # fmt: skip
    """ValueError before anything is read or built, naming the file, the tensor and the config
    fields, unless ``found`` (name -> shape, from the header of ``where``) holds every tensor of
    ``expected`` ((name, shape, the config fields that set it), taken lazily: a config declaring
    a million layers stops at the first layer the file lacks) and a model of ``declared``
    parameters fits in memory. A missing tensor's message says when the sizes ``config``
    declares (``sizes``) need more values than the file holds at all."""
    for name, shape, fields in expected:
        if name not in found:
            held = held_values(found.values())
            beyond = (
                f"; {config} declares sizes ({sizes}) that make {declared:,} parameters, but the "
                f"file holds {held:,} values in {len(found)} tensors"
                if declared > held
                else ""
            )
            raise ValueError(f"{where}: tensor {name!r} is missing{beyond}")
        if tuple(found[name]) != shape:
            raise ValueError(
                f"{where}: tensor {name!r} has shape {tuple(found[name])}, {config} says {shape} "
                f"({fields})"
            )
    check_fits(
        f"{where}: loading {declared:,} parameters (float32, read and copied into the model)",
        LOAD_COPIES * 4 * declared,
        "pick a smaller model",
    )


def finite(tensor: Tensor, name: str, where: str | Path) -> Tensor:
    """``tensor`` as float32; ValueError naming it when it holds NaN or infinity."""
    tensor = tensor.to(torch.float32)
    if not torch.isfinite(tensor).all():
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(
            f"{where}: tensor {name!r} holds {bad} NaN or infinite values; expected finite weights"
        )
    return tensor


class SafetensorsFiles:
    """The tensors of one or more ``.safetensors`` files: names and shapes from the headers at
    once (``shapes``), values only when ``read`` asks for them. ValueError naming the file when
    one is not a readable safetensors file."""

    def __init__(self, files: list[Path]) -> None:
        self.files: dict[str, Path] = {}
        self.shapes: dict[str, Shape] = {}
        for file in files:
            with self._open(file) as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    self.files[key] = file
                    self.shapes[key] = tuple(handle.get_slice(key).get_shape())

    @staticmethod
    def _open(file: Path):
        try:
            return safe_open(str(file), framework="pt")
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{file}: not a readable safetensors file ({error})") from None

    def read(self, names: Iterable[str]) -> dict[str, Tensor]:
        """The tensors ``names`` (present in ``shapes``) as finite float32."""
        by_file: dict[Path, list[str]] = {}
        for name in names:
            by_file.setdefault(self.files[name], []).append(name)
        out: dict[str, Tensor] = {}
        for file, keys in by_file.items():
            try:
                with self._open(file) as handle:
                    for key in keys:
                        out[key] = finite(handle.get_tensor(key), key, file)
            except (SafetensorError, OSError) as error:
                raise ValueError(f"{file}: not a readable safetensors file ({error})") from None
        return out


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
    return SafetensorsFiles(files).shapes if files else None

"""The weights against the model the config builds: before any weight is read, and once loaded.

Before (``check_shapes``), from the safetensors or GGUF headers and the model built on the meta
device: a tensor the model and the weights both name but with another shape (``vocab_size`` 50
against an embedding of 101 rows: transformers would print its LOAD REPORT table and raise), and
tensors of layers or experts the config does not declare (its ``num_hidden_layers`` says 1, the
weights hold 2 layers: transformers would drop the second with a table on stderr and load the
rest) are refused in one line naming the tensor and the config field. After (``check_finite``,
``say_unused``): a weight holding NaN or infinity is refused naming the tensor, before any work;
tensors transformers loaded but did not use, or parameters it had to initialise, are one
warning line instead of transformers' table.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping

import torch

from headlab.notices import HeadlabWarning

Shape = tuple[int, ...]
_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")  # a number between dots: a layer, an expert
_GGUF_BLOCK = re.compile(r"^blk\.(\d+)\.")


def _pattern(key: str) -> str:
    return _INDEX.sub("*", key)


def _names(key: str, prefix: str) -> tuple[str, ...]:
    """The names a model parameter may have in the weights: as is, without or with the base
    model's prefix (a base checkpoint loaded into a language-model class, and back)."""
    if not prefix:
        return (key,)
    return (key, key.removeprefix(prefix + "."), f"{prefix}.{key}")


def _fields(config, sizes: Shape) -> str:
    """The config's integer fields whose value is one of ``sizes`` (what set those axes)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    found = [
        f"{name}={value}"
        for name, value in sorted(text.to_dict().items())
        if isinstance(value, int) and not isinstance(value, bool) and value in sizes
    ]
    return f" ({', '.join(found)})" if found else ""


def _layers(config) -> int | None:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = getattr(text, "num_hidden_layers", None)
    return layers if isinstance(layers, int) else None


def _refuse_beyond(extra: list[str], config, where: str, declared_in: str) -> None:
    layers = _layers(config)
    field = f"; {declared_in} declares num_hidden_layers={layers}" if layers is not None else ""
    raise ValueError(
        f"{where}: its weights hold {_count(extra, 'tensor')} beyond what {declared_in} declares "
        f"(e.g. {extra[0]!r}{field}); refused before reading any weight"
    )


def check_shapes(
    shapes: Mapping[str, Shape],
    prefix: str,
    held: Mapping[str, Shape],
    config,
    where: str,
    gguf: bool,
) -> None:
    """ValueError (see the module docstring) naming ``where`` (the folder or GGUF file) unless
    the weights ``held`` (name -> shape, from the headers) agree with the model the config
    builds (``shapes``, name -> shape, from the meta build; ``prefix``: the base model's name
    inside it)."""
    declared_in = "its GGUF metadata" if gguf else "config.json"
    if gguf:  # GGUF names its layers blk.N. (transformers maps the rest itself)
        layers = _layers(config)
        extra = sorted(
            k
            for k in held
            if (m := _GGUF_BLOCK.match(k)) and layers is not None and int(m.group(1)) >= layers
        )
        if extra:
            _refuse_beyond(extra, config, where, declared_in)
        return
    matched = set()
    for key, shape in shapes.items():
        name = next((n for n in _names(key, prefix) if n in held), None)
        if name is None:
            continue
        matched.add(name)
        if tuple(held[name]) != tuple(shape):
            differing = tuple(a for a, b in zip(shape, held[name], strict=False) if a != b)
            raise ValueError(
                f"{where}: tensor {name!r} has shape {tuple(held[name])} in its weights, but "
                f"{declared_in} makes it {tuple(shape)}"
                f"{_fields(config, differing or tuple(shape))}; refused before reading any weight"
            )
    patterns = {_pattern(n) for key in shapes for n in _names(key, prefix)}
    extra = sorted(k for k in held if k not in matched and _pattern(k) in patterns)
    if extra:
        _refuse_beyond(extra, config, where, declared_in)


def check_finite(model: torch.nn.Module, where: str) -> None:
    """ValueError naming the first parameter holding NaN or infinity.

    A parameter's sum (accumulated in float32 at least) is finite only when every value is:
    one read of the weights, no mask of their size (``isfinite(p).all()`` made one per tensor,
    several seconds for SmolLM2's 540 MB on a busy machine). A sum that is not finite (a
    non-finite value, or finite values whose sum overflows) is checked value by value."""
    for name, parameter in model.named_parameters():
        if not parameter.is_floating_point():
            continue
        wide = torch.promote_types(parameter.dtype, torch.float32)
        with torch.no_grad():
            total = parameter.detach().sum(dtype=wide)
        if bool(torch.isfinite(total)) or bool(torch.isfinite(parameter).all()):
            continue
        bad = int((~torch.isfinite(parameter)).sum())
        raise ValueError(
            f"{where}: tensor {name!r} holds {bad:,} NaN or infinite values; expected finite "
            "weights"
        )


def say_unused(info: Mapping[str, object], where: str) -> None:
    """One HeadlabWarning for what transformers' loading report holds (``output_loading_info``):
    tensors of the weights the model did not use, parameters the weights lacked."""
    unused = sorted(info.get("unexpected_keys") or ())
    missing = sorted(info.get("missing_keys") or ())
    parts = []
    if unused:
        parts.append(f"{_count(unused, 'tensor')} of its weights unused (e.g. {unused[0]!r})")
    if missing:
        parts.append(
            f"{_count(missing, 'parameter')} missing from its weights, initialised at random "
            f"(e.g. {missing[0]!r})"
        )
    if parts:
        warnings.warn(f"{where}: {'; '.join(parts)}", HeadlabWarning, stacklevel=3)


def _count(items: list, noun: str) -> str:
    return f"{len(items):,} {noun}{'' if len(items) == 1 else 's'}"

"""Typed fields of a model file's metadata: a ``config.json`` or the key-value pairs of a GGUF.

Every reader of model metadata (BERT and Llama-family configs, GGUF metadata) takes its fields
through ``FileFields``, so a malformed file fails the same way wherever it is read: one
ValueError naming the file, the field, what was expected and what was received, before any
weight is read, for example
``config.json: 'num_attention_heads' must be int, got [6]`` or
``config.json: num_attention_heads must be between 1 and 16777216, got 0``.

``Unsupported`` marks a well-formed file that headlab's own models do not run (scaled rotary
positions, a sliding window, another GGUF architecture): transformers may still run it, while
it would not run a malformed file either.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from headlab.limits import MAX_SIZE, check_finite, check_int
from headlab.results.input_files import read_json as bounded_json

_MISSING = object()


class Unsupported(ValueError):
    """A valid model file that headlab's own models do not run (transformers may)."""


def read_json(path: Path, expected: type = dict) -> dict | list:
    """The JSON document at ``path``, which must be a ``expected`` (dict or list), read by the
    one bounded reader (``headlab.results.input_files.read_json``)."""
    return bounded_json(path, "", expected=expected)


def shown(value: object) -> str:
    """``value`` for a message: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class FileFields:
    """The fields of ``data`` (a config.json object or GGUF metadata) read from ``where``.

    names: the key of a field in ``data`` where it differs from the field's name (a GGUF's
    ``llama.attention.head_count`` for ``num_attention_heads``); prefix: how messages place the
    key (``rope_scaling.`` for a nested object). A field that is absent or null takes
    ``default``; without one it is an error.
    """

    def __init__(
        self, data: Mapping[str, object], where: str | Path, prefix: str = "",
        names: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.data = data
        self.where = where
        self.prefix = prefix
        self.names = names or {}

    def key(self, field: str) -> str:
        return self.names.get(field, field)

    def name(self, field: str) -> str:
        """How messages name ``field``: its key in the file."""
        return self.prefix + self.key(field)

    def error(self, field: str, expected: str, value: object) -> ValueError:
        received = shown(value)
        return ValueError(f"{self.where}: {self.name(field)!r} must be {expected}, got {received}")

    def _get(self, field: str, default: object, expected: str) -> object:
        value = self.data.get(self.key(field))
        if value is None:
            if default is _MISSING:
                name = self.name(field)
                raise ValueError(f"{self.where}: {name!r} is missing; expected {expected}")
            return default
        return value

    def has(self, field: str) -> bool:
        return self.data.get(self.key(field)) is not None

    def _checked(self, check, field: str, *args, **kwargs):
        """``check(name, value, ...)`` of ``limits`` with the file named in its error."""
        try:
            return check(self.name(field), *args, **kwargs)
        except ValueError as error:
            raise ValueError(f"{self.where}: {error}") from None

    def int(self, field: str, default: object = _MISSING, *, low: int = 1,
            high: int = MAX_SIZE) -> int:  # fmt: skip
        """An integer in [low, high] (a bool is not one)."""
        value = self._get(field, default, f"int between {low} and {high}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(field, "int", value)
        return self._checked(check_int, field, value, low=low, high=high)

    def optional_int(self, field: str, *, low: int = 0, high: int = MAX_SIZE) -> int | None:
        """An integer in [low, high], or None when the field is absent or null."""
        return self.int(field, None, low=low, high=high) if self.has(field) else None

    def number(self, field: str, default: object = _MISSING, *, positive: bool = True) -> float:
        """A finite number (> 0 when ``positive``)."""
        value = self._get(field, default, "a finite number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(field, "a number", value)
        return self._checked(check_finite, field, value, positive=positive)

    def bool(self, field: str, default: object = _MISSING) -> bool:
        value = self._get(field, default, "true or false")
        if not isinstance(value, bool):
            raise self.error(field, "true or false", value)
        return value

    def str(self, field: str, default: object = _MISSING) -> str:
        value = self._get(field, default, "a string")
        if not isinstance(value, str):
            raise self.error(field, "a string", value)
        return value

    def object(self, field: str) -> dict:
        """A JSON object; an empty one when the field is absent or null."""
        value = self._get(field, {}, "a JSON object")
        if not isinstance(value, dict):
            raise self.error(field, "a JSON object", value)
        return value

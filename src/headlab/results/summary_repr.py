"""Short reprs of results: what a notebook shows when a result is the last line of a cell.

A result holds every head's or edge's numbers (a circuits run over SmolLM2 has 70,651 edge
scores); the dataclass repr would print them all. ``summary`` writes a value in a few hundred
characters: scalars and short lists as they are, a long list as its length and first items, a
nested list as its shape, a nested result the same way; ``to_dict`` still holds everything.
"""

from __future__ import annotations

import dataclasses
import reprlib

SHORT = 6  # items of a list shown in full
_TEXT = reprlib.Repr()
_TEXT.maxstring = 60


def _shape(value: list) -> list[int]:
    shape = []
    while isinstance(value, list) and value:
        shape.append(len(value))
        value = value[0]
    return shape


def summary(value: object, depth: int = 0) -> str:
    """``value`` in a few hundred characters at most (see the module docstring)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if depth >= 2:
            return f"{type(value).__name__}(...)"
        fields = [f for f in dataclasses.fields(value) if f.repr]
        inner = ", ".join(f"{f.name}={summary(getattr(value, f.name), depth + 1)}" for f in fields)
        return f"{type(value).__name__}({inner})"
    if isinstance(value, dict):
        if len(value) <= SHORT and depth < 2:
            parts = ", ".join(f"{k!r}: {summary(v, depth + 1)}" for k, v in value.items())
            return "{" + parts + "}"
        keys = ", ".join(map(repr, list(value)[:SHORT]))
        return f"<dict of {len(value)}: {keys}{', ...' if len(value) > SHORT else ''}>"
    if isinstance(value, list | tuple):
        shape = _shape(list(value))
        if len(shape) > 1:
            return f"<{' x '.join(map(str, shape))} nested list>"
        if len(value) <= SHORT:
            return "[" + ", ".join(summary(v, depth + 1) for v in value) + "]"
        first = ", ".join(summary(v, depth + 1) for v in value[:3])
        return f"<list of {len(value)}: {first}, ...>"
    if isinstance(value, float):
        return f"{value:.6g}"
    return _TEXT.repr(value)


def summarised(cls: type) -> type:
    """Give the dataclass ``cls`` the short repr of ``summary`` (a class decorator, written above
    ``@dataclass``)."""
    cls.__repr__ = lambda self: summary(self)
    return cls

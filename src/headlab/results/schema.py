"""Checking results documents field by field: the ``from_dict`` of every results type uses this.

A document that does not follow its schema raises ValueError naming where the field is, the field,
what was expected and what was received, for example
``model-heads.metrics.entropy: expected 3 x 5 (layer x head) numbers, got 5 rows``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from headlab.limits import MAX_SIZE

# The largest integer a results file may hold where no tighter bound is given: past 2**53 a JSON
# number is no longer an exact integer for most readers, and such a count is an edit, not a run.
MAX_COUNT = 2**53
# The longest name a results file may give (a model's, a task's): the longest path a system takes
# (PATH_MAX); a name past it is an edit, and drawn as a figure's title it would need gigabytes.
MAX_NAME = 4096


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_short_text(value: object) -> bool:
    """A string of at most ``MAX_NAME`` characters (a name, a token, a label, a note)."""
    return isinstance(value, str) and len(value) <= MAX_NAME


def are_short_texts(value: object) -> bool:
    """A list of strings, each of at most ``MAX_NAME`` characters."""
    return isinstance(value, list) and all(is_short_text(item) for item in value)


def is_number(value: object) -> bool:
    """A finite int or float (not a bool)."""
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)  # type: ignore[arg-type]


def shown(value: object) -> str:
    """``value`` as the received part of a message: short JSON, or its type name."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def problem(where: str, expected: str, value: object) -> ValueError:
    return ValueError(f"{where}: expected {expected}, got {shown(value)}")


class Fields:
    """The fields of one JSON object at ``where`` (a kind and a path: ``model-prune.steps[2]``).

    Each getter returns the field or raises ValueError naming it, the expected and the received.
    """

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise problem(where, "a JSON object", data)
        self.data: dict[str, Any] = data
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def get(self, key: str, expected: str, ok: Callable[[Any], bool]) -> Any:
        if key not in self.data:
            raise ValueError(f"{self.at(key)}: expected {expected}, got nothing (missing)")
        value = self.data[key]
        if not ok(value):
            raise problem(self.at(key), expected, value)
        return value

    def str(self, key: str) -> str:
        """A string of at most ``MAX_NAME`` characters: every name, label and sentence a results
        file holds (a model's name, a method, a note); a free text is ``text``."""
        value = self.text(key)
        if len(value) > MAX_NAME:
            raise ValueError(
                f"{self.at(key)}: expected a string of at most {MAX_NAME} "
                f"characters, got {len(value)}"
            )
        return value

    def name(self, key: str) -> str:
        """A name (a model's, a task's): a string of at most ``MAX_NAME`` characters."""
        value = self.text(key)
        if len(value) > MAX_NAME:
            raise ValueError(
                f"{self.at(key)}: expected a name of at most {MAX_NAME} characters, "
                f"got {len(value)}"
            )
        return value

    def text(self, key: str) -> str:
        """A free text (a prompt, a generated text, encoded numbers), as long as the file holds
        (the file's own size bounds it: ``input_files``)."""
        return self.get(key, "a string", lambda v: isinstance(v, str))

    def int(self, key: str, low: int = 0, high: int = MAX_COUNT) -> int:
        value = self.get(key, f"an integer >= {low}", lambda v: is_int(v) and v >= low)
        if value > high:
            raise problem(self.at(key), f"an integer <= {high}", value)
        return value

    def size(self, key: str, low: int = 1) -> int:
        """A model or grid size (layers, heads): an integer in [low, ``limits.MAX_SIZE``]."""
        return self.int(key, low, MAX_SIZE)

    def held(self, key: str, value: int, held: int, what: str) -> int:
        """A size checked against what the document holds: ValueError naming ``key`` unless
        ``value`` (read already) equals ``held``, which ``what`` says in words."""
        if value != held:
            raise problem(self.at(key), f"{held} ({what})", value)
        return value

    def number(self, key: str, low: float | None = None, high: float | None = None) -> float:
        def ok(v: object) -> bool:
            return is_number(v) and (low is None or v >= low) and (high is None or v <= high)  # type: ignore[operator]

        bounds = "" if low is None and high is None else f" in [{low}, {high}]"
        return float(self.get(key, f"a finite number{bounds}", ok))

    def bool(self, key: str) -> bool:
        return self.get(key, "true or false", lambda v: isinstance(v, bool))

    def list(self, key: str, nonempty: bool = False) -> list:
        if nonempty:
            return self.get(key, "a non-empty list", lambda v: isinstance(v, list) and v != [])
        return self.get(key, "a list", lambda v: isinstance(v, list))

    def object(self, key: str, nonempty: bool = False) -> Fields:
        expected = "a non-empty JSON object" if nonempty else "a JSON object"
        value = self.get(key, expected, lambda v: isinstance(v, dict) and (v or not nonempty))
        return Fields(value, self.at(key))

    def objects(self, key: str, nonempty: bool = False) -> list[Fields]:
        """A list of JSON objects, each as Fields (``where.key[i]``); at least one when
        ``nonempty``."""
        items = self.list(key, nonempty)
        return [Fields(item, f"{self.at(key)}[{i}]") for i, item in enumerate(items)]

    def strings(self, key: str, nonempty: bool = False) -> list[str]:
        """A list of strings (names, tokens, notes), each of at most ``MAX_NAME`` characters."""
        values = self.list(key, nonempty)
        for i, v in enumerate(values):
            if not is_short_text(v):
                expected = f"a string of at most {MAX_NAME} characters"
                raise problem(
                    f"{self.at(key)}[{i}]",
                    expected,
                    v if not isinstance(v, str) else f"{len(v)} characters",
                )
        return values

    def heads(self, key: str, nonempty: bool = False) -> list[tuple[int, int]]:
        """A list of [layer, head] pairs of integers."""
        pairs = []
        for i, pair in enumerate(self.list(key, nonempty)):
            if not (isinstance(pair, list) and len(pair) == 2 and all(map(is_int, pair))):
                raise problem(f"{self.at(key)}[{i}]", "[layer, head]", pair)
            pairs.append((pair[0], pair[1]))
        return pairs

    def numbers(self, key: str) -> list[float]:
        values = self.list(key)
        for i, v in enumerate(values):
            if not is_number(v):
                raise problem(f"{self.at(key)}[{i}]", "a finite number", v)
        return [float(v) for v in values]

    def grid(self, key: str, rows: int | None = None, cols: int | None = None) -> list[list[float]]:
        """A (layer, head) grid of finite numbers; ``rows`` x ``cols`` when given."""
        return grid(
            self.get(key, "a list of rows", lambda v: isinstance(v, list)), self.at(key), rows, cols
        )

    def measures(self, known: tuple[str, ...], allowed: tuple[tuple[str, ...], ...]) -> dict:
        """The fields not in ``known``: exactly one of the ``allowed`` sets of quality measures
        (a model kind's), each a finite number. Any other field is an error naming it, so that a
        misspelt measure is not read as a new one."""
        rest = [key for key in self.data if key not in known]
        names = max(allowed, key=lambda names: len(set(names) & set(rest)))
        for key in rest:
            if key not in names:
                expected = f"no such field (the measures are {', '.join(names)})"
                raise problem(self.at(key), expected, self.data[key])
        return {key: self.number(key) for key in names}


def grid(value: list, where: str, rows: int | None, cols: int | None) -> list[list[float]]:
    shape = f"{rows} x {cols} (layer x head)" if rows is not None else "rows (layer x head)"
    if rows is not None and len(value) != rows:
        raise ValueError(f"{where}: expected {shape} numbers, got {len(value)} rows")
    out = []
    for i, row in enumerate(value):
        if not isinstance(row, list) or (cols is not None and len(row) > cols):
            got = f"{len(row)} columns" if isinstance(row, list) else shown(row)
            raise ValueError(f"{where}[{i}]: expected at most {cols} numbers, got {got}")
        for j, v in enumerate(row):
            if not is_number(v):
                raise problem(f"{where}[{i}][{j}]", "a finite number", v)
        out.append([float(v) for v in row])
    return out


def check_kind(data: dict, kind: str, where: str) -> None:
    """A document's ``"headlab"`` tag, when present, must name ``kind``."""
    tag = data.get("headlab", kind)
    if tag != kind:
        raise problem(f"{where}.headlab", repr(kind), tag)

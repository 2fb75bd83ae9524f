"""Small parsers shared by the commands."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


def int_list(text: str, option: str, low: int | None = 1) -> list[int] | None:
    """'1,2,4' -> [1, 2, 4]; '' -> None. ValueError names the option and the bad item (not an
    integer, or below ``low``; None: any integer, the library's request checks them)."""
    if not text.strip():
        return None
    values = []
    for item in text.split(","):
        try:
            value = int(item)
        except ValueError:
            raise ValueError(f"{option} takes comma-separated integers, got {item!r}") from None
        if low is not None and value < low:
            least = "positive" if low == 1 else f">= {low}"
            raise ValueError(f"{option} values must be {least}, got {value}")
        values.append(value)
    return values


def float_list(option: str, text: str) -> list[float]:
    """'0.25,0.5' -> [0.25, 0.5]; ValueError names the option and the item that is no number."""
    values = []
    for item in text.split(","):
        try:
            values.append(float(item))
        except ValueError:
            raise ValueError(
                f"{option} takes comma-separated numbers, got {item.strip()!r}"
            ) from None
    return values


# library argument -> flag, where the flag is not the argument's name with dashes
ALIASES = {"embed_dim": "--d-model", "num_heads": "--heads", "num_kv_heads": "--kv-heads"}


def as_flags(message: str, names: dict[str, str]) -> str:
    """``message`` with library argument names as flags: ``d_model=512`` -> ``--d-model 512``,
    ``force=True`` -> ``--force``, and a name with an underscore (``seq_len``) or one that starts
    the message as its flag."""
    for name, flag in names.items():
        message = re.sub(rf"(?<![\w-]){name}=True\b", flag, message)
        message = re.sub(rf"(?<![\w-]){name}=(?=[^\s)])", f"{flag} ", message)
        message = re.sub(rf"(?<![\w-]){name}=", flag, message)
        # a field of a file (``heads.num_heads``) is not an argument: no dot before it
        bare = rf"(?<![\w.-]){name}(?![\w=-])" if "_" in name else rf"^{name}(?= )"
        message = re.sub(bare, flag, message)
    return message


@contextmanager
def flags(*names: str, **aliases: str) -> Iterator[None]:
    """Within this block, a library ValueError, and a headlab warning shown, name this command's
    flags instead of the library's arguments: each of ``names`` becomes ``--name-with-dashes``
    (``d_model`` -> ``--d-model``), ``ALIASES`` and ``aliases`` give the others (``embed_dim`` ->
    ``--d-model``)."""
    mapping = {**ALIASES, **{n: "--" + n.replace("_", "-") for n in names}, **aliases}
    with _warnings_as_flags(mapping):
        try:
            yield
        except (ValueError, FileNotFoundError) as error:
            if len(error.args) == 1 and isinstance(error.args[0], str):
                error.args = (as_flags(error.args[0], mapping), *error.args[1:])
            raise


@contextmanager
def _warnings_as_flags(mapping: dict[str, str]) -> Iterator[None]:
    """A headlab warning shown within this block names flags (``results=D does not exist`` ->
    ``--results D does not exist``); it is shown when it is warned, as any other warning."""
    from headlab.notices import HeadlabWarning

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, HeadlabWarning):
            message = category(as_flags(str(message), mapping))
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown

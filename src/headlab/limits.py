"""Input-size checks: numbers in range, and work that fits in memory, refused before it starts.

One place for both rules, so that every entry point (library and CLI) refuses the same inputs
with the same kind of message: expected and received, or the estimate against the machine.
"""

from __future__ import annotations

import math
import os

# Sizes beyond these are typos, not experiments; they also keep torch's shape arithmetic (int64)
# and NumPy's seeds (uint32 for some generators, int64 for torch) in range.
MAX_SIZE = 2**24
MAX_SEED = 2**63 - 1
SHARE_OF_MEMORY = 0.5  # refuse work whose estimate exceeds this share of the machine's memory


def check_int(name: str, value: object, *, low: int = 1, high: int = MAX_SIZE) -> int:
    """``value`` as an int in [low, high]; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def check_sizes(name: str, values: object, *, high: int = MAX_SIZE) -> tuple[int, ...]:
    """``values`` as a non-empty tuple of ints, each in [1, high]; ValueError naming ``name``."""
    values = tuple(values)  # type: ignore[arg-type]
    if not values:
        raise ValueError(f"{name} must list at least one integer, got none")
    return tuple(check_int(name, v, high=high) for v in values)


def check_seed(name: str, value: object) -> int:
    return check_int(name, value, low=0, high=MAX_SEED)


def check_finite(name: str, value: float, *, positive: bool = False) -> float:
    """``value`` as a finite float (and > 0 when ``positive``); ValueError otherwise."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or (positive and value <= 0):
        expected = "a finite number > 0" if positive else "a finite number"
        raise ValueError(f"{name} must be {expected}, got {value}")
    return float(value)


def machine_memory() -> int:
    """Physical memory of this machine in bytes (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover (not POSIX)
        return 0


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def check_fits(what: str, nbytes: float, hint: str = "") -> None:
    """ValueError, with the estimate, when ``nbytes`` is more than half of the machine's memory."""
    total = machine_memory()
    if total and nbytes > SHARE_OF_MEMORY * total:
        advice = f"; {hint}" if hint else ""
        raise ValueError(
            f"{what} needs about {gib(nbytes)}, more than half of this machine's "
            f"{gib(total)} of memory; refused before starting{advice}"
        )


def check_prompt(prompt_tokens: int, max_new_tokens: int, max_positions: int) -> None:
    """A generation request that fits (``max_new_tokens`` already checked): at least one prompt
    token, and prompt + new tokens within the model's positions. Raises ValueError."""
    if not prompt_tokens:
        raise ValueError("the prompt must have at least one token, got an empty text")
    if prompt_tokens + max_new_tokens > max_positions:
        raise ValueError(
            f"prompt ({prompt_tokens} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
            f"model's {max_positions} positions"
        )

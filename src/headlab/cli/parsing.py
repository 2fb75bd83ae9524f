"""Small parsers shared by the commands."""

from __future__ import annotations


def int_list(text: str, option: str) -> list[int] | None:
    """'1,2,4' -> [1, 2, 4]; '' -> None. ValueError names the option and the bad item."""
    if not text.strip():
        return None
    values = []
    for item in text.split(","):
        try:
            value = int(item)
        except ValueError:
            raise ValueError(f"{option} takes comma-separated integers, got {item!r}") from None
        if value <= 0:
            raise ValueError(f"{option} values must be positive, got {value}")
        values.append(value)
    return values


def sizes(text: str, option: str, high: int) -> tuple[int, ...]:
    """'8,16' -> (8, 16), each in [1, high]; ValueError names the option (also for none)."""
    from headlab.limits import check_int

    values = int_list(text, option)
    if not values:
        raise ValueError(f"{option} must list at least one integer, got {text!r}")
    return tuple(check_int(option, v, high=high) for v in values)

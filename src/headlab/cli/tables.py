"""Tables that fit the terminal (80 columns when it is not one) without truncating a number.

``fitted_tables`` splits the columns of a wide table into several tables, each repeating the key
columns (``layer``, ``task``...), instead of letting rich shrink cells to ``2.…``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

# A column costs its widest cell plus one space of padding each side and one rule.
_COLUMN_EXTRA = 3


def terminal_width() -> int:
    """The width rich prints at: the terminal's, else $COLUMNS, else 80."""
    return Console().width


def _column_widths(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    cells = [[column, *(row[i] for row in rows)] for i, column in enumerate(columns)]
    return [
        max(len(line) for cell in column for line in cell.splitlines() or [""]) for column in cells
    ]


def column_groups(widths: Sequence[int], keys: int, width: int) -> list[list[int]]:
    """Indices of the non-key columns, in groups whose table (keys repeated) fits ``width``.

    The groups are as even as the widths allow; a column wider than the room left gets a group
    of its own (rich then wraps its cells rather than cutting them)."""
    room = width - 1 - sum(w + _COLUMN_EXTRA for w in widths[:keys])
    rest = list(range(keys, len(widths)))
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i in rest:
        cost = widths[i] + _COLUMN_EXTRA
        if current and used + cost > room:
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += cost
    if current:
        groups.append(current)
    if len(groups) > 1:  # even out: 12 heads at 80 columns are 6 + 6, not 10 + 2
        per = -(-len(rest) // len(groups))
        even = [rest[i : i + per] for i in range(0, len(rest), per)]
        if all(_cost(widths, g) <= room for g in even):
            groups = even
    return groups or [[]]


def _cost(widths: Sequence[int], group: Sequence[int]) -> int:
    return sum(widths[i] + _COLUMN_EXTRA for i in group)


def fitted_tables(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    keys: int = 1,
    left: Sequence[str] = (),
    width: int | None = None,
) -> list[Table]:
    """``rows`` under ``columns`` as one table, or several when it is wider than ``width``
    (default: the terminal's). The first ``keys`` columns appear in every table; ``left``
    names the columns justified left (text), the others are right-justified (numbers)."""
    width = terminal_width() if width is None else width
    widths = _column_widths(columns, rows)
    groups = column_groups(widths, keys, width)
    tables = []
    for n, group in enumerate(groups):
        shown = [*range(keys), *group]
        part = f" ({n + 1}/{len(groups)})" if len(groups) > 1 else ""
        # rich wraps a title at the table's width: widen a narrow table to its title (up to the
        # terminal) rather than leave one word of the title alone on a line
        natural = 1 + sum(widths[i] + _COLUMN_EXTRA for i in shown)
        table = Table(
            title=title + part,
            title_justify="left",
            min_width=min(len(title + part), width) if len(title + part) > natural else None,
        )
        for i in shown:
            justify = "left" if columns[i] in left else "right"
            table.add_column(columns[i], justify=justify, overflow="fold")
        for row in rows:
            table.add_row(*(row[i] for i in shown))
        tables.append(table)
    return tables

"""Each head's role on one long text (``headlab.heads.roles``): the thresholds of the rules and
the ``head-roles`` part of a long-context results file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from headlab.results.schema import Fields, problem

SINKS, WINDOW = 4, 256  # StreamingLLM's 4 sink tokens, a 256-token window
#: Tokens a match must have run for before its next token counts as copied (``heads.repeats``).
MIN_MATCH = 6
RETRIEVAL, COPY, SINK, LOCAL = 0.1, 0.3, 0.3, 0.05  # the thresholds of the rules above


ROLES = ("retrieval", "copy", "sink", "local", "mixed")


@dataclass(frozen=True)
class HeadRoles:
    """Role scores of every head on one text ((layer, head) grids; (layer, kv_head) for the
    groups). ``retrieval`` and ``copy_weight`` are None when the text has no copy positions
    (``retrieval`` also for a model that does not predict tokens); ``window_error``, the group
    errors and ``roles`` are None when the text is not longer than sinks + window (every key is
    then in the window). ``note`` says in words what was not measured and why."""

    KIND: ClassVar[str] = "head-roles"

    sinks: int
    window: int
    copy_positions: int
    retrieval: list[list[float]] | None
    copy_weight: list[list[float]] | None
    window_error: list[list[float]] | None
    group_window_error: list[list[float]] | None
    roles: list[list[str]] | None
    note: str = ""

    def counts(self) -> dict[str, int]:
        """role -> number of heads (every role, 0 included); empty without roles."""
        if self.roles is None:
            return {}
        flat = [r for row in self.roles for r in row]
        return {name: flat.count(name) for name in ROLES}

    def examples(
        self, name: str, first: list[list[float]], count: int = 3
    ) -> list[tuple[int, int]]:
        """The ``count`` heads (layer, head) of role ``name`` that show it most clearly, by the
        score of its rule: retrieval and copy weight highest first, sinks by the first-token
        weight ``first`` (layer, head), local heads by the lowest window error, mixed heads by
        the highest (the least local). Empty without roles."""
        if self.roles is None:
            return []
        scores = {
            "retrieval": self.retrieval,
            "copy": self.copy_weight,
            "sink": first,
            "local": self.window_error,
            "mixed": self.window_error,
        }
        grid, sign = scores[name], -1.0 if name == "local" else 1.0
        cells = [
            (layer, h)
            for layer, row in enumerate(self.roles)
            for h, r in enumerate(row)
            if r == name
        ]
        return sorted(cells, key=lambda c: (-sign * grid[c[0]][c[1]], c))[:count]

    def __repr__(self) -> str:
        roles = ", ".join(f"{n} {r}" for r, n in self.counts().items()) or "no roles"
        return f"HeadRoles(sinks {self.sinks}, window {self.window}: {roles})"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields, layers: int, heads: int) -> HeadRoles:
        """ValueError naming the field unless every grid is layers x heads and every role known."""

        def grid(name: str) -> list[list[float]] | None:
            return None if f.data.get(name) is None else f.grid(name, layers, heads)

        roles = f.data.get("roles")
        if roles is not None:
            ok = (
                isinstance(roles, list)
                and len(roles) == layers
                and all(
                    isinstance(row, list) and len(row) <= heads and all(r in ROLES for r in row)
                    for row in roles
                )
            )
            if not ok:
                raise problem(f.at("roles"), f"{layers} rows of roles ({', '.join(ROLES)})", roles)
        groups = f.data.get("group_window_error")
        if groups is not None:
            groups = f.grid("group_window_error", layers, heads)
        note = f.str("note") if "note" in f.data else ""
        return cls(
            f.int("sinks", 0),
            f.int("window", 1),
            f.int("copy_positions", 0),
            grid("retrieval"),
            grid("copy_weight"),
            grid("window_error"),
            groups,
            roles,
            note,
        )

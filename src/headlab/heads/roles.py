"""What each head is for at long context: a role per head, with the numbers behind it.

From one streaming pass over a long text (``heads.long_context``), per head:

    retrieval     Wu et al. (2024): at the text's copy positions (``heads.repeats``), the share
                  where the model's own top-1 prediction is the true next token AND the head's
                  largest weight is on that token's earlier occurrence
    copy_weight   the mean weight on that earlier occurrence at the copy positions (induction on
                  the text's own repeats, Olsson et al. 2022)
    window_error  mean over queries of ||o - o^window|| / ||o||: the relative error of the
                  head's output if it saw only the first ``sinks`` keys and the last ``window`` ones
                  (0: nothing changes; not a share: above 1 the windowed output is farther
                  from the full one than no output at all)
                  (DuoAttention's streaming heads, StreamingLLM's sinks), exact, from the same
                  weights; per K/V group, the largest of its query heads' (a group's cache can
                  only shrink if every head reading it can)
    first         the mean weight on the first token (the attention sink, Gu et al. 2025)

and a role, the first rule that holds:

    retrieval   retrieval >= 0.1 (Wu et al.'s threshold)
    copy        copy_weight >= 0.3
    sink        first >= 0.3 and window_error <= 0.05: parks on the first token, else local
    local       window_error <= 0.05: sinks plus a recent window reproduce its output
    mixed       none of these

The previous-token weight and the mean attention distance (``heads.statistics``) are shown
beside the roles but decide none: a previous-token head is a local head (its window error is
about 0), and the window error measures exactly what a short distance only suggests (a head
with a mean distance of 2000 tokens can still lose nothing to a window when its far weight
sits on the sinks). ``HeadRoles.examples`` lists each role's clearest heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import ClassVar

import torch

from headlab.results.schema import Fields, problem

SINKS, WINDOW = 4, 256  # StreamingLLM's 4 sink tokens, a 256-token window
RETRIEVAL, COPY, SINK, LOCAL = 0.1, 0.3, 0.3, 0.05  # the thresholds of the rules above
ROLES = ("retrieval", "copy", "sink", "local", "mixed")


def role(retrieval: float | None, copy: float | None, first: float, window_error: float) -> str:
    """The role of one head by the rules of the module docstring (None: not measured)."""
    if retrieval is not None and retrieval >= RETRIEVAL:
        return "retrieval"
    if copy is not None and copy >= COPY:
        return "copy"
    if window_error <= LOCAL:
        return "sink" if first >= SINK else "local"
    return "mixed"


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
        scores = {"retrieval": self.retrieval, "copy": self.copy_weight, "sink": first,
                  "local": self.window_error, "mixed": self.window_error}  # fmt: skip
        grid, sign = scores[name], -1.0 if name == "local" else 1.0
        cells = [(layer, h) for layer, row in enumerate(self.roles)
                 for h, r in enumerate(row) if r == name]  # fmt: skip
        return sorted(cells, key=lambda c: (-sign * grid[c[0]][c[1]], c))[:count]

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
        return cls(f.int("sinks", 0), f.int("window", 1), f.int("copy_positions", 0),
                   grid("retrieval"), grid("copy_weight"), grid("window_error"), groups, roles,
                   note)  # fmt: skip


def head_roles(
    *,
    sinks: int,
    window: int,
    first: list[list[float]],
    window_error: list[list[float]] | None,
    copy_weight: list[list[float]] | None,
    retrieval_hits: list[list[int]] | None,
    copies: int,
    kv_heads_per_layer: list[int],
    no_window: str,
    notes: Sequence[str] = (),
) -> HeadRoles:
    """The roles from measured means: ``first``, ``window_error`` (None: not measured, and
    ``no_window`` says why) and ``copy_weight`` (layer, head); ``retrieval_hits`` (layer, head)
    the copy positions where the head's largest weight is on the source and the model predicted
    the copied token (None: the model predicts no tokens); ``copies`` the copy positions."""
    notes = list(notes)
    retrieval = None
    if copies == 0:
        notes.insert(0, "no copy positions (no repeat of an earlier passage): no retrieval or copy "
                     "scores")  # fmt: skip
        copy_weight = None
    elif retrieval_hits is None:
        notes.insert(0, "the model predicts no tokens: no retrieval scores")
    else:
        retrieval = [(torch.tensor(row, dtype=torch.float64) / copies).tolist()
                     for row in retrieval_hits]  # fmt: skip
    groups = roles = None
    if window_error is None:
        notes.append(no_window)
    else:
        groups = [
            torch.tensor(row, dtype=torch.float64).view(kv, -1).amax(dim=1).tolist() if row else []
            for row, kv in zip(window_error, kv_heads_per_layer, strict=True)
        ]
        roles = [
            [
                role(
                    None if retrieval is None else retrieval[layer][h],
                    None if copy_weight is None else copy_weight[layer][h],
                    first[layer][h],
                    window_error[layer][h],
                )
                for h in range(len(row))
            ]
            for layer, row in enumerate(window_error)
        ]
    return HeadRoles(sinks, window, copies, retrieval, copy_weight, window_error, groups, roles,
                     "; ".join(notes))  # fmt: skip

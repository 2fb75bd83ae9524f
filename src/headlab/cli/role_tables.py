"""The head-role tables of one long text or a corpus (``model heads --text-file``, ``model
roles``): what ``headlab.heads.roles`` measured, printed."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from headlab.cli.tables import fitted_tables

ROLE_LETTERS = {"retrieval": "R", "copy": "C", "sink": "S", "local": "L", "mixed": "."}


def role_tables(roles, statistics=None, top: int = 5) -> list[Table | Text]:
    """The roles of every head of one long text: counts, a layers x heads grid of letters, the
    numbers behind each role (its clearest heads, with ``statistics``' first-token weight,
    previous-token weight and distance), and the K/V groups a window would serve best."""
    out: list[Table | Text] = []
    head = (
        f"head roles: window {roles.sinks} sinks + {roles.window} recent keys; "
        f"{roles.copy_positions} copy positions"
    )
    if roles.note:
        out.append(Text(f"{head}. {roles.note}."))
    else:
        out.append(Text(head + "."))
    counts = roles.counts()
    if counts:
        total = sum(counts.values())
        shown = ", ".join(f"{n} {name}" for name, n in counts.items())
        out.append(Text(f"of {total} heads: {shown} (R C S L . in the grid below)"))
        heads = max(len(row) for row in roles.roles)
        rows = [
            [str(layer), *(ROLE_LETTERS[r] for r in row), *([""] * (heads - len(row)))]
            for layer, row in enumerate(roles.roles)
        ]
        columns = ["layer", *(f"h{h}" for h in range(heads))]
        out.extend(fitted_tables("role of each head", columns, rows))
        if statistics is not None:
            out.extend(_numbers_behind(roles, statistics))
    if roles.group_window_error is not None:
        groups = sorted(
            (v, layer, g)
            for layer, row in enumerate(roles.group_window_error)
            for g, v in enumerate(row)
        )
        rows = [[str(layer), str(g), f"{v:.3f}"] for v, layer, g in groups[:top]]
        title = "K/V groups that sinks + a window serve best"
        out.extend(fitted_tables(title, ["layer", "group", "window error"], rows))
        out.append(
            Text(
                "(window error: ||o - o_window|| / ||o||, the relative error of the "
                "output of the group's worst head with only the sinks and the window; "
                "0: nothing changes, above 1: farther from the full output than no "
                "output)"
            )
        )
    return out


def _numbers_behind(roles, statistics, count: int = 3) -> list[Table | Text]:
    """Up to ``count`` heads of each role with every number a rule reads, and the two shown
    beside them (previous-token weight, mean distance in tokens)."""
    from headlab.results.head_roles import COPY, LOCAL, RETRIEVAL, ROLES, SINK

    first = statistics.metrics[statistics.first_token]
    metrics = statistics.metrics

    def score(grid, layer: int, h: int, fmt: str = "{:.2f}") -> str:
        return "-" if grid is None else fmt.format(grid[layer][h])

    rows = []
    for name in ROLES:
        for layer, h in roles.examples(name, first, count):
            rows.append(
                [
                    name,
                    f"{layer}.{h}",
                    score(roles.retrieval, layer, h),
                    score(roles.copy_weight, layer, h),
                    score(first, layer, h),
                    score(roles.window_error, layer, h, "{:.3f}"),
                    score(metrics["prev"], layer, h),
                    score(metrics["distance"], layer, h, "{:.0f}"),
                ]
            )
    columns = ["role", "head", "retrieval", "copy", "first", "window", "prev", "distance"]
    title = f"the numbers behind each role (its {count} clearest heads, layer.head)"
    out: list[Table | Text] = [*fitted_tables(title, columns, rows, keys=2, left=["role"])]
    out.append(
        Text(
            f"rules, the first that holds: retrieval >= {RETRIEVAL}; copy >= {COPY}; window "
            f"<= {LOCAL}: sink if first >= {SINK}, else local; otherwise mixed"
        )
    )
    if roles.retrieval is not None and not roles.counts()["retrieval"]:
        best, layer, h = max(
            (v, layer, h) for layer, row in enumerate(roles.retrieval) for h, v in enumerate(row)
        )
        out.append(Text(f"no retrieval head: the best retrieval score is {best:.2f} ({layer}.{h})"))
    return out

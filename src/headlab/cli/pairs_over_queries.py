"""``headlab why-attends --all-queries``: one head's pair matrix summed over every query of a
text, each at the key it attends (``circuits.score_pairs_run``), parsed and printed.

Checked before the model loads: the flags that go with --all-queries (no pair options, one text
source), the layer, head and length, the output paths, the text file, and from the model's
config: a causal model, the length within its positions, the layer and head within its sizes,
a family the streamed matrix reads. Then it loads, runs with progress, writes the results file
(``why_attends_all_queries.json``, ``pairs-over-queries``) and the figure, and prints the
strongest pairs and both marginals.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from headlab.cli.model_source import ModelChoice, model_outline, open_model
from headlab.cli.outputs import claim, write_outputs
from headlab.cli.parsing import flags
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables
from headlab.results.locations import RESULTS_DIR

KIND = "pairs-over-queries"
OUT = RESULTS_DIR / "why_attends_all_queries.json"
#: Rows of each printed table.
ROWS = 8
#: The request's fields as the command's flags.
FLAGS = {"layer": "--layer", "head": "--head", "length": "--length", "text_file": "--text-file"}


def refuse_pair_options(all_queries: bool, pair_options: dict[str, bool], text_given: bool):
    """ValueError (one line) for flags that conflict: the chosen-pair options (``pair_options``:
    flag -> given) with --all-queries, --text with --text-file, --text-file or --length
    without --all-queries."""
    if not all_queries:
        raise ValueError("--text-file and --length go with --all-queries, which was not given")
    given = [flag for flag, on in pair_options.items() if on]
    if given:
        raise ValueError(
            f"{given[0]} does not go with --all-queries, which takes every query at the key "
            "it attends (leave one of them out)"
        )
    if text_given:
        raise ValueError("give --text or --text-file, not both")


def why_attends_all_queries(
    source: ModelChoice,
    layer: int,
    head: int,
    text: str | None,
    text_file: Path | None,
    length: int | None,
    out: Path | None,
    figure: Path | None,
    force: bool,
    as_json: bool,
) -> None:
    """The command's work once its flags are known not to conflict (module docstring).
    ``text``: the text given with --text, or the command's default text when neither --text-file
    nor --length names another (None: the file, or the built-in copy task at --length)."""
    from headlab.circuits.score_pairs_run import PairsRequest, pairs_result

    with flags(**FLAGS):
        request = PairsRequest(layer, head, text, text_file, length)
    out = OUT if out is None else out
    claim(KIND, out, force=force, figure=figure)
    opened = request.open("--text-file")  # checked before the model loads, read after
    outline = model_outline(source, quiet=as_json, kind_checked=False)
    with flags(**FLAGS):
        request.check_config(outline.name, outline.causal, outline.config, outline.max_positions)
    loaded = open_model(source, quiet=as_json, kind_checked=True)
    what = "why-attends --all-queries: keys and values of one run, then the queries"
    with progress(what, None, quiet=as_json) as update, flags(**FLAGS):
        result = pairs_result(loaded, request, text=opened, progress=update)
    from headlab.report.pairs_over_queries_figures import pairs_over_queries_figure

    written = write_outputs(
        KIND,
        result,
        out,
        figure=figure,
        draw=pairs_over_queries_figure,
        force=force,
        as_json=as_json,
    )
    if written is None:
        return
    print_result(result)
    print(f"wrote {out}")
    if figure is not None:
        print(f"wrote {figure}")


def _number(value: float) -> str:
    """A signed number in 4 significant digits, without an exponent up to 10**9."""
    return f"{value:+.0f}" if 1e4 <= abs(value) < 1e9 else f"{value:+.4g}"


def print_result(result) -> None:
    """The strongest cells of the matrix, then both marginals, and where the queries attend."""
    console = Console()
    total = result.total
    queries = len(result.keys)
    title = (
        f"{result.layer}.{result.head} of {result.model}, {queries} queries at their attended "
        f"keys: q.k summed {_number(total).lstrip('+')}; the strongest pairs"
    )
    rows = [
        [q, k, _number(v), f"{v / total:+.3f}" if total else "-"] for q, k, v in result.strongest
    ]
    for table in fitted_tables(
        title,
        ["query side", "key side", "summed", "share"],
        rows[:ROWS],
        keys=2,
        left=["query side", "key side"],
    ):
        console.print(table)
    order = sorted(range(len(result.components)), key=lambda c: -abs(result.key_marginal[c]))
    marginals = [
        [
            result.components[c],
            _number(result.key_marginal[c]),
            _number(result.query_marginal[c]),
        ]
        for c in order[:ROWS]
    ]
    for table in fitted_tables(
        "the marginals summed over queries (by the key side's size)",
        ["component", "key side", "query side"],
        marginals,
        left=["component"],
    ):
        console.print(table)
    console.print(
        Text(
            f"of {queries} queries, {result.at_first} attend the first position and "
            f"{result.at_themselves} themselves; "
            f"the text: {result.text}"
        )
    )
    console.print(
        Text(
            "key side: what the attended key's stream holds; query side: the query's; each "
            "sums to q.k (norms held at the run's scales)"
        )
    )


__all__ = ["OUT", "print_result", "refuse_pair_options", "why_attends_all_queries"]

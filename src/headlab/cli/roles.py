"""``headlab model kv-budget``, and the head-role tables of ``model heads --text-file``.

The tables print what ``headlab.heads.roles`` and ``headlab.heads.kv_budget`` measured; the
command parses, calls ``kv_budget`` and prints.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from headlab.cli.model import (
    BACKEND,
    DOWNLOAD,
    TRUST_REMOTE_CODE,
    Route,
    claim_analysis,
    model_app,
    open_model,
)
from headlab.cli.outputs import an_input, emit_result, writing
from headlab.cli.parsing import float_list
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables
from headlab.results.locations import model_results

FORMATS = ("{:.2f}", "{:.2f}x", "{:.3f}", "{:+.1%}", "{:.3f}")
TEXT_FILE = typer.Option(
    None,
    "--text-file",
    help="Held-out text to evaluate on (it must repeat an earlier passage) [default: the "
    "built-in copy task].",
    callback=an_input,
)
CALIBRATION_FILE = typer.Option(
    None,
    "--calibration-file",
    help="Text the groups are ranked on [default: the copy task with another seed].",
    callback=an_input,
)
OUT = typer.Option(model_results("kv-budget"), "--out", help="Results file (JSON).")
FIGURE = typer.Option(
    None, "--figure", help="Write budget against perplexity and copy accuracy (PNG)."
)
DEFAULT_BUDGETS = "0.25,0.4,0.5,0.6"
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
        groups = sorted((v, layer, g) for layer, row in enumerate(roles.group_window_error)
                        for g, v in enumerate(row))  # fmt: skip
        rows = [[str(layer), str(g), f"{v:.3f}"] for v, layer, g in groups[:top]]
        title = "K/V groups that sinks + a window serve best"
        out.extend(fitted_tables(title, ["layer", "group", "window error"], rows))
        out.append(Text("(window error: ||o - o_window|| / ||o||, the relative error of the "
                        "output of the group's worst head with only the sinks and the window; "
                        "0: nothing changes, above 1: farther from the full output than no "
                        "output)"))  # fmt: skip
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
            rows.append([name, f"{layer}.{h}", score(roles.retrieval, layer, h),
                         score(roles.copy_weight, layer, h), score(first, layer, h),
                         score(roles.window_error, layer, h, "{:.3f}"),
                         score(metrics["prev"], layer, h),
                         score(metrics["distance"], layer, h, "{:.0f}")])  # fmt: skip
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
        best, layer, h = max((v, layer, h) for layer, row in enumerate(roles.retrieval)
                             for h, v in enumerate(row))  # fmt: skip
        out.append(Text(f"no retrieval head: the best retrieval score is {best:.2f} ({layer}.{h})"))
    return out


def budget_tables(result) -> list[Table | Text]:
    """The plan runs (full, chosen, random, opposite per budget) and the retrieval check."""
    base = result.baseline()
    columns = ["plan", "budget", "KV saved", "perplexity", "change", "copy accuracy"]
    rows = []
    for run in result.runs:
        kind = run.kind if run.seed is None else f"random {run.seed}"
        change = run.perplexity / base.perplexity - 1
        numbers = (run.budget, run.kv_saved, run.perplexity, change, run.copy_accuracy)
        rows.append([kind, *(f.format(v) for f, v in zip(FORMATS, numbers, strict=True))])
    title = (
        f"KV budget, {result.model}, {result.n_tokens} tokens, window {result.sinks} sinks + "
        f"{result.window}; {result.copy_positions} copy positions"
    )
    out: list[Table | Text] = [*fitted_tables(title, columns, rows, keys=2, left=["plan"])]
    for name, context in (("held-out", result.held_out), ("calibration", result.calibration)):
        if context is not None and context.truncated:
            out.append(Text(f"the {name} text: {context.n_tokens} tokens (cut from at least "
                            f"{context.text_tokens}: the rest was not analysed)"))  # fmt: skip
    check = result.retrieval
    if check is not None:
        randoms = ", ".join(f"{a:.3f}" for a in check.random_copy_accuracy)
        out.append(
            Text(
                f"copy accuracy with the top {check.k} retrieval heads masked: "
                f"{check.copy_accuracy:.3f}; with {check.k} random heads masked: {randoms} "
                f"(none masked: {base.copy_accuracy:.3f})"
                + (f"; {check.note}" if check.note else "")
            )
        )
    return out


@model_app.command("kv-budget")
def kv_budget_command(
    model: str | None = typer.Option(
        "smollm2", "--model", help="smollm2 (default), a language model's folder, file or hub id."
    ),
    backend: str | None = BACKEND,
    download: bool = DOWNLOAD,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    budgets: str | None = typer.Option(
        None,
        "--budgets",
        help="Shares of K/V groups that keep sinks + window [default: 0.25,0.4,0.5,0.6 "
        "without --kv-saved].",
    ),
    kv_saved: str | None = typer.Option(
        None,
        "--kv-saved",
        help="KV memory savings to plan for, full / planned (1.67: the plan keeps 60%); each "
        "becomes the fewest groups that reach it.",
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="Length of the texts [default: the model's context]."
    ),
    sinks: int = typer.Option(4, "--sinks", help="First tokens every windowed group keeps."),
    window: int = typer.Option(256, "--window", help="Recent tokens every windowed group keeps."),
    seeds: int = typer.Option(3, "--seeds", help="Random plans of each size (at least 3)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the built-in copy task."),
    text_file: Path | None = TEXT_FILE,
    calibration_file: Path | None = CALIBRATION_FILE,
    retrieval_k: int | None = typer.Option(
        None, "--retrieval-k", help="Retrieval heads to mask [default: those scoring >= 0.1]."
    ),
    out: Path = OUT,
    figure: Path | None = FIGURE,
    as_json: bool = typer.Option(False, "--json", help="Print the results document as JSON."),
    force: bool = typer.Option(
        False, "--force", help="Replace --out (and --figure) if it is not this analysis' file."
    ),
) -> None:
    """A per-head KV budget, proven by running the model with it.

    Ranks the K/V groups by how much of their heads' output a cache of the first --sinks and the
    last --window tokens would lose, keeps only those tokens for the best --budgets share of
    them, runs the model exactly so on a held-out long text, and compares perplexity and copy
    accuracy with the full model, with random plans of the same size and with the opposite
    ranking. Then masks the top retrieval heads against as many random heads.
    """
    from headlab.heads.kv_budget import MIN_SEEDS, check_budgets, groups_for_saving, kv_budget
    from headlab.heads.retrieval_check import check_retrieval_k_declared
    from headlab.limits import check_int, check_seed
    from headlab.results.input_files import open_text

    if budgets is None and kv_saved is None:
        budgets = DEFAULT_BUDGETS
    shares = [] if budgets is None else float_list("--budgets", budgets)
    savings = [] if kv_saved is None else float_list("--kv-saved", kv_saved)
    with _flags():
        check_budgets(shares, savings)
    check_int("--sinks", sinks, low=0)
    check_int("--window", window)
    check_int("--seeds", seeds, low=MIN_SEEDS, high=100)
    check_seed("--seed", seed)
    if max_tokens is not None:
        check_int("--max-tokens", max_tokens, low=2)
        if max_tokens <= sinks + window:
            raise ValueError(
                f"--max-tokens {max_tokens} is not longer than --sinks {sinks} + --window "
                f"{window}: every key would be in the window"
            )
        with _flags():  # a saving out of reach at this length, before the model loads
            for target in savings:
                groups_for_saving(target, 1, max_tokens, sinks + window)
    if retrieval_k is not None:
        check_int("--retrieval-k", retrieval_k)
        with _flags():  # the config's head count, before the weights load
            check_retrieval_k_declared(model, retrieval_k)
    claim_analysis("kv-budget", out, force, figure)
    # Checked before the model loads; read after it, only as far as the cut needs.
    evaluation = None if text_file is None else open_text(text_file, "--text-file")
    calibration = (
        None if calibration_file is None else open_text(calibration_file, "--calibration-file")
    )
    loaded = open_model(model, Route(backend, download, trust_remote_code, as_json))
    if max_tokens is not None:
        check_int("--max-tokens", max_tokens, low=2, high=loaded.max_positions)
    limit = max_tokens or loaded.max_positions
    if evaluation is not None:
        evaluation = evaluation.read_tokens(loaded.count_tokens, limit).text
    if calibration is not None:
        calibration = calibration.read_tokens(loaded.count_tokens, limit).text
    with progress("KV budget: model runs", None, quiet=as_json) as update, _flags():
        result = kv_budget(
            loaded,
            budgets=shares,
            kv_saved=savings,
            n_tokens=max_tokens,
            sinks=sinks,
            window=window,
            seeds=seeds,
            seed=seed,
            calibration_text=calibration,
            evaluation_text=evaluation,
            retrieval_k=retrieval_k,
            on_step=update,
        )
    if figure is not None:
        from headlab.report.figure_files import write_kv_budget_figure

        with writing("--figure"):
            write_kv_budget_figure(result, figure, force=force)
    emit_result(result, out, force, as_json, budget_tables(result))


def _flags():
    from headlab.cli.parsing import flags

    return flags(
        budgets="--budgets",
        sinks="--sinks",
        window="--window",
        seeds="--seeds",
        seed="--seed",
        kv_saved="--kv-saved",
        n_tokens="--max-tokens",
        calibration_text="--calibration-file",
        evaluation_text="--text-file",
        retrieval_k="--retrieval-k",
    )


def register(app: typer.Typer) -> None:
    """Nothing of its own: the command above is on ``model_app`` (``headlab model kv-budget``)."""

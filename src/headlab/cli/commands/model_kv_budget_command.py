"""``headlab model kv-budget``: a per-head KV budget, proven by running the model with it. The
options become the library's ``KVBudgetRequest`` (every bound checked there, before the model
loads); the tables print what ``headlab.heads.kv_budget`` measured."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from headlab.cli.model_options import AS_JSON, claim_analysis, out_option
from headlab.cli.model_source import (
    ModelChoice,
    model_source,
    open_model,
    require_next_token_logits,
)
from headlab.cli.outputs import FORCE, an_input, emit_result, writing
from headlab.cli.parsing import flags, float_list
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables

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
FIGURE = typer.Option(
    None, "--figure", help="Write budget against perplexity and copy accuracy (PNG)."
)
DEFAULT_BUDGETS = "0.25,0.4,0.5,0.6"
# KVBudgetRequest's fields and kv_budget's arguments, which their errors name, are these flags
FLAGS = {
    "budgets": "--budgets",
    "sinks": "--sinks",
    "window": "--window",
    "seeds": "--seeds",
    "seed": "--seed",
    "kv_saved": "--kv-saved",
    "n_tokens": "--max-tokens",
    "calibration_text": "--calibration-file",
    "evaluation_text": "--text-file",
    "retrieval_k": "--retrieval-k",
}


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
            out.append(
                Text(
                    f"the {name} text: {context.n_tokens} tokens (cut from at least "
                    f"{context.text_tokens}: the rest was not analysed)"
                )
            )
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


OUT = out_option("kv-budget")


@model_source(
    default="smollm2", help="smollm2 (default), a language model's folder, file or hub id."
)
def kv_budget_command(
    source: ModelChoice,
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
    seeds: int = typer.Option(3, "--seeds", help="Random plans of each size (3 to 100)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the built-in copy task."),
    text_file: Path | None = TEXT_FILE,
    calibration_file: Path | None = CALIBRATION_FILE,
    retrieval_k: int | None = typer.Option(
        None, "--retrieval-k", help="Retrieval heads to mask [default: those scoring >= 0.1]."
    ),
    out: Path = OUT,
    figure: Path | None = FIGURE,
    as_json: bool = AS_JSON,
    force: bool = FORCE,
) -> None:
    """A per-head KV budget, proven by running the model with it.

    Ranks the K/V groups by how much of their heads' output a cache of the first --sinks and the
    last --window tokens would lose, keeps only those tokens for the best --budgets share of
    them, runs the model exactly so on a held-out long text, and compares perplexity and copy
    accuracy with the full model, with random plans of the same size and with the opposite
    ranking. Then masks the top retrieval heads against as many random heads.
    """
    from headlab.heads.kv_budget import KVBudgetRequest, kv_budget
    from headlab.heads.retrieval_check import check_retrieval_k_declared
    from headlab.results.input_files import open_text

    if budgets is None and kv_saved is None:
        budgets = DEFAULT_BUDGETS
    shares = [] if budgets is None else float_list("--budgets", budgets)
    savings = [] if kv_saved is None else float_list("--kv-saved", kv_saved)
    with flags(**FLAGS):  # every bound, before the model loads
        request = KVBudgetRequest(
            budgets=tuple(shares),
            kv_saved=tuple(savings),
            n_tokens=max_tokens,
            sinks=sinks,
            window=window,
            seeds=seeds,
            seed=seed,
            retrieval_k=retrieval_k,
        )
        if retrieval_k is not None:  # the config's head count, before the weights load
            check_retrieval_k_declared(source.name_or_path, retrieval_k)
    claim_analysis("kv-budget", out, force, figure)
    # Checked before the model is read; read after it loads, only as far as the cut needs.
    evaluation = None if text_file is None else open_text(text_file, "--text-file")
    calibration = (
        None if calibration_file is None else open_text(calibration_file, "--calibration-file")
    )
    require_next_token_logits(source, "a KV budget", quiet=as_json)
    loaded = open_model(source, quiet=as_json, kind_checked=True)
    with flags(**FLAGS):  # before a text is read: only as far as this length
        limit = request.length_for(loaded.max_positions)
    if evaluation is not None:
        evaluation = evaluation.read_tokens(loaded.count_tokens, limit).text
    if calibration is not None:
        calibration = calibration.read_tokens(loaded.count_tokens, limit).text
    with progress("KV budget: model runs", None, quiet=as_json) as update, flags(**FLAGS):
        result = kv_budget(
            loaded,
            request,
            calibration_text=calibration,
            evaluation_text=evaluation,
            on_step=update,
        )
    if figure is not None:
        from headlab.report.figure_files import write_kv_budget_figure

        with writing("--figure"):
            write_kv_budget_figure(result, figure, force=force)
    emit_result(result, out, force, as_json, budget_tables(result))


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("kv-budget")(kv_budget_command)

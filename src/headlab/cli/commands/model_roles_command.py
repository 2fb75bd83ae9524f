"""``headlab model roles``: every head's role over a folder of documents, on the local pool or Ray,
resumable per document; parses, calls ``headlab.experiments.corpus_roles`` and prints."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.text import Text

from headlab.cli.model_source import ModelChoice, model_source
from headlab.cli.outputs import FORCE, an_input_folder, claim, emit_result, note_lines
from headlab.cli.parsing import flags
from headlab.cli.progress import progress
from headlab.cli.role_tables import role_tables
from headlab.results.locations import RESULTS_DIR, model_results

DOCUMENTS = typer.Option(
    ...,
    "--documents",
    help="A folder of documents: its .txt files (UTF-8), one pass each.",
    callback=an_input_folder,
)
OUT = typer.Option(
    RESULTS_DIR / "model_roles.jsonl",
    "--out",
    help="Results file (JSONL, appended): one line per finished document; a rerun skips them.",
)
SUMMARY = typer.Option(
    model_results("roles"),
    "--summary",
    help="The merged results document (JSON): every head's statistics and role over the corpus.",
)
# the library's arguments, which its errors name, are this command's flags
FLAGS = (
    "model",
    "backend",
    "workers",
    "executor",
    "address",
    "sinks",
    "window",
    "max_tokens",
    "documents",
    "out",
)


@model_source(default="smollm2", help="smollm2 (default), minilm, a model's path or a hub id.")
def roles_command(
    documents: Path = DOCUMENTS,
    source: ModelChoice = None,  # the model-source options (``model_source``)
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="Cut each document to this many tokens [default: its context]."
    ),
    sinks: int = typer.Option(4, "--sinks", help="First tokens the window errors keep."),
    window: int = typer.Option(256, "--window", help="Recent tokens the window errors keep."),
    executor: str = typer.Option("local", "--executor", help="local or ray."),
    workers: int = typer.Option(
        1, "--workers", help="Local worker processes (each loads the model once)."
    ),
    address: str = typer.Option("", "--address", help="Ray cluster address (default: local)."),
    out: Path = OUT,
    summary: Path = SUMMARY,
    as_json: bool = typer.Option(False, "--json", help="Print the merged document as JSON."),
    force: bool = FORCE,
) -> None:
    """Every head's role over many documents, merged exactly.

    One streaming pass per document (as model heads --text-file), on the local pool or a Ray
    cluster (--executor ray), each worker loading the model once. Each finished document's sums
    are appended to --out, so a rerun skips them; at the end the sums of every document are added
    in the folder's order and divided once: the statistics, window errors, copy weights and
    retrieval scores of the whole corpus, and a role per head, written to --summary.
    """
    from headlab.experiments.corpus_roles import ModelSource, plan_corpus, read_documents
    from headlab.experiments.executors import capped_workers, check_executor, check_reachable
    from headlab.results.corpus_roles_result import RoleRequest

    with flags(*FLAGS):
        check_executor(executor, address)
        capped_workers(workers, 1)
        options = RoleRequest(max_tokens, sinks, window).check()
        if Path(out).absolute() == Path(summary).absolute():
            raise ValueError(f"--out and --summary must be different files, got {out} twice")
        claim("model-corpus-roles", summary, force=force, out_flag="--summary")
        texts = read_documents(documents)
        model = ModelSource.of(
            source.model,
            backend=source.backend,
            download=source.download,
            trust_remote_code=source.trust_remote_code,
        )
        plan = plan_corpus(model, texts, options, out)  # every input checked, no model loaded
        if executor == "ray" and address:
            check_reachable(address)  # Ray itself would retry an unreachable address for minutes
    workers = capped_workers(workers, len(plan.todo))
    where = "on Ray" if executor == "ray" else f"on {workers} worker(s)"
    print(
        f"corpus roles: {len(plan.jobs)} documents, {plan.skipped} already finished in "
        f"{plan.out} (skipped), {len(plan.todo)} to run {where}",
        file=sys.stderr if as_json else sys.stdout,
        flush=True,
    )
    with flags(*FLAGS):
        _run(plan, executor, workers, address or None, as_json)
        from headlab.experiments.corpus_roles import corpus_summary

        result = corpus_summary(plan)
    emit_result(result, summary, force, as_json, _tables(result), out_flag="--summary")


def _run(plan, executor: str, workers: int, address: str | None, quiet: bool) -> None:
    """Run the plan's documents under a progress bar over documents. Ctrl-C: says what was
    saved, then re-raises (exit 130)."""
    from headlab.experiments.corpus_roles import run_corpus

    done = 0
    try:
        with progress("corpus roles: documents", len(plan.todo), quiet=quiet) as update:
            for result in run_corpus(plan, executor=executor, workers=workers, address=address):
                done += 1
                update(done, detail=f"{result.job.document.name} ({result.seconds:.1f} s)")
    except KeyboardInterrupt:
        print(
            f"headlab: interrupted; {done} documents of this session saved in {plan.out}; "
            "run the same command again to resume",
            file=sys.stderr,
        )
        raise


def _tables(result) -> list:
    c = result.corpus
    limit = result.options.max_tokens
    to = "the model's context" if limit is None else f"--max-tokens {limit}"
    cut = f", {c.truncated} cut to {to}" if c.truncated else ""
    line = (
        f"{result.statistics.model} over {c.documents} documents{cut}: {c.tokens} tokens "
        f"({c.window_tokens} in documents longer than the window), {c.copy_positions} copy "
        f"positions ({c.correct_predictions} predicted right)"
    )
    return [
        Text(line),
        *note_lines(result.statistics.notes),
        *role_tables(result.roles, result.statistics),
    ]


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("roles")(roles_command)

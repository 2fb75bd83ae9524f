"""``headlab report``: build the self-contained HTML report and print the path of index.html.

It measures first (``headlab.analysis.report_measuring``: the text through a seeded layer and the
trained model, the seed scenarios, coupling, the parameter table), then the report writes those
measurements beside its page (``measurements.json``) and draws the page from them and the results
folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from headlab.cli.model_source import ModelChoice, hub_access, model_source
from headlab.cli.outputs import an_input
from headlab.cli.parsing import flags
from headlab.cli.progress import progress
from headlab.results.defaults import DEFAULT_TEXT
from headlab.results.locations import REPORT_DIR, RESULTS_DIR


@model_source(
    default="minilm", help="Trained model shown on the text: minilm, smollm2, a path or a hub id."
)
def report(
    out: Annotated[Path, typer.Option("--out", help="Directory of the report.")] = REPORT_DIR,
    text: Annotated[str, typer.Option("--text", help="Text whose attention is shown.")] = (
        DEFAULT_TEXT
    ),
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also replace headlab's own output of another kind (a figures folder, a file "
            "headlab wrote). Never a folder headlab did not write, files a user added inside "
            "a headlab folder, the current folder or one holding an input.",
        ),
    ] = False,
    png: Annotated[
        Path | None, typer.Option("--png", help="Also write every figure as a PNG here.")
    ] = None,
    results: Annotated[
        Path | None,
        typer.Option(
            "--results",
            help=f"Directory of model and sweep results files (default: {RESULTS_DIR}).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of scenarios and layer.")] = 0,
    text_file: Annotated[
        Path | None,
        typer.Option(
            "--text-file",
            help="Read the text from this UTF-8 file (not with --text).",
            callback=an_input,
        ),
    ] = None,
    source: ModelChoice = None,  # the model-source options (``model_source``)
) -> None:
    """Write DIR/index.html: the seed questions answered, heads, gradients, model and sweeps."""
    from headlab.report import ReportRequest, build_report, check_targets

    cut_note = ""
    if text_file is not None:
        from headlab.analysis.report_measuring import read_report_text

        if text != DEFAULT_TEXT:
            raise ValueError("--text and --text-file: expected one of them, got both")
        text, cut_note = read_report_text(text_file, "--text-file")  # streamed, cut
    hub_access(source.download)
    named = results is not None and not results.is_dir()  # named but not there: mistyped?
    results = RESULTS_DIR if results is None else results  # the default: missing in a fresh folder
    options = ReportRequest(
        text=text,
        results=results,
        seed=seed,
        model=source.model,
        backend=source.backend,
        download=source.download,
        trust_remote_code=source.trust_remote_code,
        text_file=text_file,
        text_cut_note=cut_note,
    )
    names = ("out", "png", "force", "model", "backend", "download", "trust_remote_code")
    with flags(*names):
        check_targets(out, options, force=force, png=png)  # a refusal before the measuring
        with progress("report: measuring", None):  # no steps to count: a pulse
            from headlab.analysis.report_measuring import measure_report

            measured = measure_report(options)
        with progress("report: drawing", None):
            index = build_report(out, options, measured, force=force, png=png)
    if named:  # said once the report is built (a refused --out is the one line of its own)
        import warnings

        from headlab.notices import HeadlabWarning

        what = "does not exist" if not results.exists() else "is not a directory"
        message = f"--results {results} {what}; the report shows no results files"
        warnings.warn(message, HeadlabWarning, stacklevel=1)
    print(index)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command()(report)

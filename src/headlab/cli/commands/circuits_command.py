"""``headlab circuits``: how a model's heads compose on a task, found by one method.

Parses, checks every input it can before the model loads (task, method, --steps, --top's
lower bound, the --pairs file, the output paths), loads, checks what needs the model (the
pairs' tokens, --top against the edges), then calls ``headlab.circuits.run`` and prints: the
model's own performance on the task first, then the top edges, then the faithfulness curve.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from headlab.cli import kind_circuits as seq2seq
from headlab.cli import model_kinds as kinds
from headlab.cli.model_source import (
    ModelChoice,
    model_source,
    open_model,
    require_next_token_logits,
)
from headlab.cli.outputs import AS_JSON, FORCE, an_input, claim, write_outputs, writing
from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables
from headlab.results.locations import RESULTS_DIR
from headlab.results.node_scores import NODE_METHODS, NodeScores

OUT = typer.Option(
    None,
    "--out",
    help=f"Results file (JSON). Default: {RESULTS_DIR / 'circuits.json'}, "
    f"{RESULTS_DIR / 'circuit_nodes.json'} for the node methods.",
)
BY_POSITION = typer.Option(
    False,
    "--by-position",
    help="With nodes, nodes-ig or head-patching: also score each node at each position alone "
    "(head-patching: one more patched run per node and position).",
)
GRAPH_FIGURE = typer.Option(None, "--figure", help="Write the circuit on the graph (PNG).")
CURVE_FIGURE = typer.Option(
    None,
    "--faithfulness-figure",
    help="Measure the faithfulness curve against random circuits and write it (PNG).",
)
ROTARY_OFFSETS = typer.Option(
    "",
    "--rotary-offsets",
    help="With --method composition: Q- and K-composition with rotary at these relative "
    "offsets (comma-separated: the key that many positions before the query; 1 for a "
    "previous-token head, the repeat's distance for an induction head). Default: without rotary.",
)
EDGES = typer.Option(
    None,
    "--edges",
    help="With --method path-patching: the edges to patch, comma-separated names "
    "('16.0->18.g2<k>,mlp.2->logits'), or an earlier circuits results file (its top edges). "
    "Default: every edge, refused when the estimate passes 30 min.",
)
PAIRS = typer.Option(
    None,
    "--pairs",
    help="Your own JSONL of clean/corrupted pairs (instead of --task).",
    callback=an_input,
)


CIRCUITS_MODEL_HELP = (
    "smollm2 (default), a path (.gguf, a transformers checkpoint folder) or a hub id: a "
    "language model (the tasks need next-token logits)."
)


@model_source(default="smollm2", help=CIRCUITS_MODEL_HELP, folder=True, backend=False)
def circuits(
    task: str | None = typer.Option(
        None, "--task", help="induction (default), copy, ioi or greater-than."
    ),
    pairs: Path | None = PAIRS,
    method: str = typer.Option(
        "eap",
        "--method",
        help="Of edges: composition, path-patching, eap, eap-ig (on the "
        "inputs), eap-ig-activations (Hanna et al.'s) or eap-ig-senders (each sender's "
        "activations). Of nodes (heads, K/V groups, MLPs): nodes (attribution, one forward and "
        "one backward), nodes-ig, or head-patching (one exact patched run per node).",
    ),
    steps: int = typer.Option(5, "--steps", help="EAP-IG's interpolation steps m."),
    rotary_offsets: str = ROTARY_OFFSETS,
    edges: str | None = EDGES,
    top: int = typer.Option(20, "--top", help="Edges in the circuit (the top n by |score|)."),
    n_pairs: int = typer.Option(8, "--n-pairs", help="Pairs of the built-in task."),
    length: int | None = typer.Option(
        None, "--length", help="induction: tokens repeated [40]; copy: tokens of the text [512]."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the task's pairs."),
    source_text: list[str] | None = kinds.SOURCE_TEXT,
    target_text: list[str] | None = kinds.TARGET_TEXT,
    audio: Path | None = kinds.AUDIO,
    corrupted_source_text: list[str] | None = seq2seq.CORRUPTED_TEXT,
    corrupted_audio: Path | None = seq2seq.CORRUPTED_AUDIO,
    image: Path | None = kinds.IMAGE,
    corrupted_image: Path | None = seq2seq.CORRUPTED_IMAGE,
    source: ModelChoice = None,  # the model-source options (``model_source``)
    by_position: bool = BY_POSITION,
    out: Path | None = OUT,
    figure: Path | None = GRAPH_FIGURE,
    faithfulness_figure: Path | None = CURVE_FIGURE,
    force: bool = FORCE,
    as_json: bool = AS_JSON,
) -> None:
    """Find the circuit of a task: which head feeds which, scored edge by edge.

    Every edge (sender -> receiver's q, k or v input, MLP or logits) scored by weight-based
    composition, exact path patching, EAP or EAP-IG on clean/corrupted pairs; the model's own
    accuracy on the task first. An encoder-decoder: a source (--source-text, --audio) and its
    corrupted twin, the target read with both; its graph spans both streams. An image model
    (ViT, DINOv2, CLIP's vision tower): --image and --corrupted-image.
    """
    from headlab.circuits.run import CircuitRequest, needs_equal_lengths

    if seq2seq.asked(
        audio,
        source_text,
        target_text,
        corrupted_source_text,
        corrupted_audio,
        image,
        corrupted_image,
    ) or seq2seq.is_other_kind(source):
        from headlab.report.circuit_figures import circuit_graph_figure

        out = out or RESULTS_DIR / "circuits.json"
        given = {"--task": task, "--pairs": pairs, "--faithfulness-figure": faithfulness_figure}
        result = seq2seq.kind_circuits(
            source,
            audio,
            source_text,
            target_text,
            corrupted_source_text,
            corrupted_audio,
            image=image,
            corrupted_image=corrupted_image,
            method=method,
            top=top,
            edges=_edges(edges),
            other_inputs=[k for k, v in given.items() if v is not None],
            claim=lambda: _claim(out, figure, None, force),
            quiet=as_json,
        )
        written = write_outputs(
            "circuits",
            result,
            out,
            figure=figure,
            draw=circuit_graph_figure,
            force=force,
            as_json=as_json,
        )
        if written is not None:
            _print(result)
            for path in (out, figure):
                if path is not None:
                    print(f"wrote {path}")
        return
    from headlab.circuits.tasks import TaskRequest

    if pairs is not None and task is not None:
        raise ValueError(f"pass --task or --pairs, not both (got --task {task} and --pairs)")
    offsets = int_list(rotary_offsets, "--rotary-offsets", low=0)
    chosen = _edges(edges)
    with flags(
        "method",
        "steps",
        "top",
        "n_pairs",
        "length",
        "seed",
        "task",
        "rotary_offsets",
        "edges",
        "by_position",
        pairs_file="--pairs",
        faithfulness="--faithfulness-figure",
    ):
        request = CircuitRequest(
            TaskRequest(
                task="pairs" if pairs is not None else task or "induction",
                n_pairs=n_pairs,
                length=length,
                seed=seed,
                pairs_file=None if pairs is None else str(pairs),
                equal_lengths=needs_equal_lengths(method) if method else True,
            ),
            method=method,
            top=top,
            steps=steps,
            faithfulness=faithfulness_figure is not None,
            rotary_offsets=None if offsets is None else tuple(offsets),
            edges=chosen,
            by_position=by_position,
        )
    nodes = request.method in NODE_METHODS
    if nodes and figure is not None:
        raise ValueError(
            f"--figure draws a circuit of edges: not with --method "
            f"{request.method} (it scores nodes), got --figure {figure}"
        )
    out = out or RESULTS_DIR / ("circuit_nodes.json" if nodes else "circuits.json")
    if pairs is not None:  # the file's own problems, before the model loads
        from headlab.circuits.tasks_pairs import read_pairs

        read_pairs(pairs)
    _claim(out, figure, faithfulness_figure, force, NodeScores.KIND if nodes else "circuits")
    found = require_next_token_logits(source, request.needed_by, quiet=as_json, tokenizer=True)
    from headlab.circuits.fits import check_fits_model

    with flags("length", "n_pairs", "by_position", pairs_file="--pairs"):  # the task against
        sweep = check_fits_model(request, found)  # the model's config, read once before the load
    if sweep is not None and not as_json:
        print(f"headlab: {sweep.says()}", file=sys.stderr)
    loaded = open_model(source, quiet=as_json, kind_checked=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing more is fetched, even with --download
    from headlab.circuits.run import prepare, run_circuits

    with flags("top", "edges", pairs_file="--pairs", offsets="--rotary-offsets"):
        prepared = prepare(loaded, request)
    if request.method == "path-patching":
        from headlab.circuits.run import check_patching, patching_estimate

        estimate = patching_estimate(loaded, prepared)
        with flags("edges"):
            check_patching(estimate, request)
        if not as_json:
            print(f"headlab: {estimate.says()}", file=sys.stderr)
    described = f"circuits: {request.method} on {request.task.task}"
    if nodes:
        _nodes(loaded, prepared, described, out, force, as_json)
        return
    with progress(described, None, quiet=as_json) as update:
        result = run_circuits(
            loaded, prepared, on_step=update, on_stage=lambda stage: update(0, None, stage)
        )
    from headlab.report.circuit_figures import circuit_graph_figure

    written = write_outputs(
        "circuits",
        result,
        out,
        figure=figure,
        draw=circuit_graph_figure,
        force=force,
        as_json=as_json,
    )
    if faithfulness_figure is not None:
        _write_curve(result, faithfulness_figure, force)
    if written is None:
        return
    _print(result)
    print(f"wrote {out}")
    for path in (figure, faithfulness_figure):
        if path is not None:
            print(f"wrote {path}")


def _edges(given: str | None) -> tuple[str, ...] | None:
    """--edges: comma-separated edge names, or a circuits results file (its top edges)."""
    if given is None:
        return None
    if os.path.isfile(given):
        from headlab.results.circuit_run import CircuitRun
        from headlab.results.json_store import read_result

        with flags("edges"):
            run = read_result(given, CircuitRun)
        return tuple(edge for edge, _ in run.top_edges())
    return tuple(name.strip() for name in given.split(",") if name.strip())


def _claim(
    out: Path, figure: Path | None, curve: Path | None, force: bool, kind: str = "circuits"
) -> None:
    """Every output path checked before the model loads (and again when written)."""
    from headlab.results.output_policy import Kind, OutputRefused, check_output

    claim(kind, out, force=force, figure=figure)
    if curve is None:
        return
    for other, flag in ((out, "--out"), (figure, "--figure")):
        if other is not None and os.path.abspath(other) == os.path.abspath(curve):
            raise OutputRefused(
                f"--faithfulness-figure and {flag} must be different files, got {curve} twice"
            )
    with writing("--faithfulness-figure"):
        check_output(curve, Kind.png("circuits"), force=force)


def _write_curve(result, path: Path, force: bool) -> None:
    from headlab.report.circuit_figures import faithfulness_figure
    from headlab.report.png_files import save_figure
    from headlab.results.output_policy import Kind

    with writing("--faithfulness-figure"):
        save_figure(faithfulness_figure(result), path, Kind.png("circuits"), force=force)


def _print(result) -> None:
    import textwrap

    console = Console()
    performance = result.performance
    if performance is None:
        print("composition reads the weights only: the model was not run on the task")
    else:
        print(textwrap.fill(performance.says(), 80))
    if performance is not None and not performance.does_task:
        print(
            textwrap.fill(
                f"warning: {result.model} does not do {result.task}; a circuit of "
                "a behaviour the model lacks explains little",
                80,
            )
        )
    scores = result.scores
    baseline = result.baseline or {}
    rows = []
    for rank, (edge, score) in enumerate(result.top_edges(), start=1):
        sender, rest = edge.split("->", 1)
        receiver, _, input_ = rest.partition("<")
        input_ = input_.rstrip(">") or "in"
        row = [str(rank), sender, receiver, input_, f"{score:+.4g}"]
        if baseline:  # the random matrices' score of this edge's input
            mode = f"{input_}_group" if ".g" in receiver else input_
            row.append(f"{baseline[mode]:.3f}" if mode in baseline else "-")
        rows.append(row)
    steps = f" (m={result.steps})" if result.steps else ""
    title = f"Top {len(rows)} of {len(scores.edges)} edges, {result.method}{steps}, {result.task}"
    columns = ["#", "sender", "receiver", "input", "score"] + (["random"] if baseline else [])
    for table in fitted_tables(title, columns, rows, keys=1, left=["sender", "receiver", "input"]):
        console.print(table)
    rotary = (
        "without rotary"
        if result.rotary_offsets is None
        else "rotary at offsets " + ", ".join(str(o) for o in result.rotary_offsets)
    )
    what = (
        f"composition score (0..1, weights only, {rotary}); random: the mean score of "
        "random matrices of the same shapes"
        if result.method == "composition"
        else f"change in {scores.metric} (clean {scores.clean_metric:.4g}, corrupted "
        f"{scores.corrupted_metric:.4g})"
    )
    console.print(Text(f"score: {what}"))
    curve = result.faithfulness
    if curve is None:
        return
    rows = [
        [f"{100 * f:g}%", str(n), f"{v:.3f}", f"{sum(r) / len(r):.3f}"]
        for f, n, v, r in zip(
            curve.fractions, curve.sizes, curve.faithfulness, curve.random, strict=True
        )
    ]
    seeds = len(curve.random_cpr)
    for table in fitted_tables(
        f"Faithfulness of the top-n circuit, random: mean of {seeds}",
        ["edges", "n", "circuit", "random"],
        rows,
        keys=1,
    ):
        console.print(table)
    console.print(
        Text(
            f"CPR {curve.cpr:.3f} (random {sum(curve.random_cpr) / seeds:.3f}), "
            f"CMD {curve.cmd:.3f} (random {sum(curve.random_cmd) / seeds:.3f})"
        )
    )


def _nodes(loaded, prepared, described: str, out: Path, force: bool, as_json: bool) -> None:
    """A node method's run, its results file and its table (node_tables.py)."""
    from headlab.circuits.node_run import run_nodes
    from headlab.cli.node_tables import node_lines
    from headlab.cli.outputs import emit_result

    with progress(described, None, quiet=as_json) as update:
        result = run_nodes(
            loaded, prepared, on_step=update, on_stage=lambda stage: update(0, None, stage)
        )
    emit_result(result, out, force, as_json, node_lines(result, prepared.request.top))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command()(circuits)

"""``headlab formation``: when the induction circuit forms during training (the 2-layer models
that ``headlab sweep --task induction`` trains, measured with the circuits tools at checkpoints)."""

from __future__ import annotations

from pathlib import Path

import typer

from headlab.cli.outputs import FORCE
from headlab.cli.parsing import flags, int_list
from headlab.results.locations import RESULTS_DIR

KIND = "induction-circuit"
OUT = typer.Option(
    RESULTS_DIR / "induction-circuit.json", "--out", help="Results file (InductionFormation)."
)
FIGURE = typer.Option(
    None, "--figure", help="Accuracy, K-composition and path patching over steps (PNG)."
)


def induction_circuit(
    heads: str = typer.Option("1,8", "--heads", help="Heads per layer, comma separated."),
    steps: int = typer.Option(800, "--steps", help="Training steps of each run."),
    every: int = typer.Option(50, "--every", help="Measure every this many steps."),
    seed: str = typer.Option(
        "0",
        "--seed",
        help="Seed of the model, the data and the detectors; several, comma "
        "separated (0,1,2), train one run per seed and head count.",
    ),
    lr: float = typer.Option(3e-3, "--lr", help="Peak learning rate (the sweep's 3e-3)."),
    out: Path = OUT,
    figure: Path = FIGURE,
    force: bool = FORCE,
    as_json: bool = typer.Option(False, "--json", help="Print the results document only."),
) -> None:
    """When the induction circuit forms during training (2-layer toys)."""
    from rich.console import Console

    from headlab.cli.outputs import claim, write_outputs
    from headlab.cli.progress import progress
    from headlab.cli.tables import fitted_tables
    from headlab.experiments.induction_circuit import FormationRequest, induction_formation
    from headlab.report.formation_section import jump_text
    from headlab.report.induction_circuit_figures import formation_figure

    counts = int_list(heads, "--heads") or []
    seeds = int_list(seed, "--seed", low=0) or []
    with flags("heads", "steps", "every", "seed", "lr"):
        if not counts:
            raise ValueError("heads must name at least one head count, got none")
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seed must name distinct seeds, got {seeds}")
        for h in counts:
            for s in seeds:
                FormationRequest(heads=h, steps=steps, every=every, seed=s, lr=lr)
    claim(KIND, out, force=force, figure=figure)
    total = steps * len(counts) * len(seeds)
    with progress("training and measuring", total, quiet=as_json) as update:
        finished = [0]  # steps of the runs finished

        def on_step(h: int, step: int, _steps: int, stage: str) -> None:
            # ``stage``: the measuring of the checkpoint at ``step`` under way and its count
            # (the last one's K edges and faithfulness take longer than the training)
            update(
                done=finished[0] + step,
                detail=f"h = {h}, step {step}" + (f": {stage}" if stage else ""),
            )
            if step == steps and not stage:  # the run is done, its last measuring included
                finished[0] += steps

        result = induction_formation(counts, steps, every, seeds, on_step, lr=lr)
    written = write_outputs(
        KIND, result, out, figure=figure, draw=formation_figure, force=force, as_json=as_json
    )
    if written is None:
        return
    several = len(seeds) > 1
    # the two heads are names (layer.head), written so that they do not read as scores
    columns = [
        "h",
        "step",
        "loss",
        "acc",
        "prev head",
        "ind head",
        "K-comp",
        "base",
        "patch",
        "K path",
    ]
    if several:
        columns[1:1] = ["seed"]
    cells = [
        [
            str(run.heads),
            *([str(run.seed)] if several else []),
            str(c.step),
            f"{c.loss:.3f}",
            f"{c.accuracy:.3f}",
            f"head 0.{c.previous_head}",
            f"head 1.{c.induction_head}",
            f"{c.k_composition:.3f}",
            f"{c.k_baseline:.3f}",
            f"{c.patching_effect:+.3f}",
            f"{c.k_path_effect:+.3f}",
        ]
        for run in result.runs
        for c in run.checkpoints
    ]
    title = "Induction circuit over training (patch, K path: change in log p(answer))"
    Console().print(*fitted_tables(title, columns, cells, keys=3 if several else 2))
    if several:
        print("Phase change (the first checkpoint at accuracy >= 0.5), per seed:")
        for h, found in result.jump_steps().items():
            print(f"  h = {h}: " + jump_text(found))
    for run in result.runs:
        if run.k_edges is not None:
            k = run.k_edges
            top = ", ".join(f"{e[:-3]} {v:+.3g}" for e, v in k.top("exact"))
            who = f"h = {run.heads}" + (f", seed {run.seed}" if several else "")
            print(f"{who}: {len(k.edges)} K edges at the end, top 3 by exact patching:")
            print(f"  {top}")
            curve = run.faithfulness
            if curve is not None:
                pairs = list(zip(curve.fractions, curve.faithfulness, strict=True))[:3]
                at = [f"{f:.0%} {v:.2f}" for f, v in pairs]
                print(
                    f"  faithfulness of the top EAP-IG circuit: {', '.join(at)}; CPR "
                    f"{curve.cpr:.2f}"
                )
            if len(k.edges) >= 3:
                print(
                    f"  Spearman with exact: EAP {k.spearman('eap'):.2f}, EAP-IG "
                    f"{k.spearman('eap_ig'):.2f}, composition (sizes) "
                    f"{k.spearman('composition', absolute=True):.2f}"
                )
    print(f"wrote {out}" + (f" and {figure}" if figure is not None else ""))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command("formation")(induction_circuit)

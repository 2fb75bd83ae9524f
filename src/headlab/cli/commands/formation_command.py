"""``headlab formation``: when the induction circuit forms during training (2-layer
GPT-2 on the sweep's induction task, measured with the circuits tools at checkpoints)."""

from __future__ import annotations

from pathlib import Path

import typer

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
    seed: int = typer.Option(0, "--seed", help="Seed of the model, the data and the detectors."),
    init_std: float = typer.Option(0.02, "--init-std", help="GPT-2's initializer_range."),
    out: Path = OUT,
    figure: Path = FIGURE,
    force: bool = typer.Option(False, "--force", help="Replace a file headlab did not write."),
    as_json: bool = typer.Option(False, "--json", help="Print the results document only."),
) -> None:
    """When the induction circuit forms during training (2-layer toys)."""
    from rich.console import Console

    from headlab.cli.outputs import claim, write_outputs
    from headlab.cli.progress import progress
    from headlab.cli.tables import fitted_tables
    from headlab.experiments.induction_circuit import FormationConfig, induction_formation
    from headlab.report.induction_circuit_figures import formation_figure

    counts = int_list(heads, "--heads") or []
    with flags("heads", "steps", "every", "seed", "init_std"):
        if not counts:
            raise ValueError("heads must name at least one head count, got none")
        for h in counts:
            FormationConfig(heads=h, steps=steps, every=every, seed=seed, init_std=init_std)
    claim(KIND, out, force=force, figure=figure)
    total = steps * len(counts)
    with progress("training and measuring", total, quiet=as_json) as update:
        done = {h: 0 for h in counts}

        def on_step(h: int, step: int, _steps: int) -> None:
            done[h] = step
            if step % 10 == 0 or step == _steps:
                update(done=sum(done.values()), detail=f"h = {h}")

        result = induction_formation(counts, steps, every, seed, on_step, init_std=init_std)
    written = write_outputs(KIND, result, out, figure=figure, draw=formation_figure,
                            force=force, as_json=as_json)  # fmt: skip
    if written is None:
        return
    columns = ["h", "step", "loss", "acc", "prev", "ind", "K-comp", "base", "patch"]
    cells = [
        [str(run.heads), str(c.step), f"{c.loss:.3f}", f"{c.accuracy:.3f}",
         f"0.{c.previous_head}", f"1.{c.induction_head}", f"{c.k_composition:.3f}",
         f"{c.k_baseline:.3f}", f"{c.patching_effect:+.3f}"]
        for run in result.runs
        for c in run.checkpoints
    ]  # fmt: skip
    title = "Induction circuit over training (patch: change in log p(answer))"
    Console().print(*fitted_tables(title, columns, cells, keys=2))
    print(f"wrote {out}" + (f" and {figure}" if figure is not None else ""))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command("formation")(induction_circuit)

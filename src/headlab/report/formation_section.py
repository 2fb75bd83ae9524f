"""The report's part on when the induction circuit forms (``headlab formation``'s results file,
``InductionFormation``): its figure (accuracy, K-composition beside the baseline, the edge's
path-patching effect over steps), and per head count the phase change and what the circuit's
measures did around it. Reads and draws only; the template escapes every text."""

from __future__ import annotations

import base64
from pathlib import Path

from headlab.report import figures
from headlab.report.induction_circuit_figures import formation_figure
from headlab.report.reading import Skipped, skipping
from headlab.results.induction_circuit_result import FormationRun, InductionFormation
from headlab.results.json_store import read_result

FILE = "induction-circuit.json"
COMMAND = "headlab formation --heads 1,8 --steps 2400 --every 50 --seed 0,1,2"


def formation_section(directory: Path, pngs: dict[str, bytes]) -> dict:
    """The part: title, figure, one row per run, command; or {missing: command, file} (and
    skipped: why, for a file that breaks its schema)."""
    path = Path(directory) / FILE
    part = skipping(path, lambda: _part(path, pngs))
    if part is None or isinstance(part, Skipped):
        missing = part.part(COMMAND) if part else {"missing": COMMAND, "file": str(path)}
        part = {"title": "When the induction circuit forms", **missing}
    return part


def _row(run: FormationRun) -> dict:
    jump = run.phase_change()
    last, strongest = run.checkpoints[-1], run.strongest_edge()
    row = {
        "heads": run.heads,
        "seed": run.seed,
        "steps": run.steps,
        "final": f"{last.accuracy:.3f}",
        "edge": last.edge,
        "k_final": f"{last.k_composition:.3f} ({last.k_baseline:.3f})",
        "strongest": f"{strongest.patching_effect:+.3f} at step {strongest.step}",
        "patch_final": f"{last.patching_effect:+.3f}",
        "path_final": _signed(last.k_path_effect),
    }
    if run.k_edges is not None:
        k = run.k_edges
        row["k_edges"] = {
            "count": len(k.edges),
            "top": {
                m: ", ".join(f"{e[:-3]} {v:+.3g}" for e, v in k.top(m))
                for m in ("exact", "eap", "eap_ig", "composition")
            },
            "spearman": {
                "eap": _rho(k, "eap"),
                "eap_ig": _rho(k, "eap_ig"),
                "composition": _rho(k, "composition", absolute=True),
            },
        }
    curve = run.faithfulness
    if curve is not None:
        parts = []
        for fraction, size, value, drawn in zip(
            curve.fractions, curve.sizes, curve.faithfulness, curve.random, strict=True
        ):
            if fraction in (0.01, 0.02, 0.05):
                edges = f"{size} edge" + "s" * (size != 1)
                parts.append(
                    f"{fraction:.0%} ({edges}): {_two(value)} (random "
                    f"{_two(sum(drawn) / len(drawn))})"
                )
        random_cpr = sum(curve.random_cpr) / len(curve.random_cpr)
        row["faithfulness"] = "; ".join(parts) + (
            f"; CPR {curve.cpr:.2f} (random {random_cpr:.2f}) over {curve.edges} edges"
        )
    if jump is None:
        row["jump"] = "none (accuracy never crosses 0.5)"
        return row
    before, after = jump
    row["jump"] = (
        f"steps {before.step}-{after.step}: accuracy {before.accuracy:.2f} -> {after.accuracy:.2f}"
    )
    row["k_jump"] = f"{before.k_composition:.3f} -> {after.k_composition:.3f}"
    row["patch_jump"] = f"{before.patching_effect:+.3f} -> {after.patching_effect:+.3f}"
    row["path_jump"] = f"{_signed(before.k_path_effect)} -> {_signed(after.k_path_effect)}"
    return row


def jump_text(found: list[tuple[int, int | None]]) -> str:
    """One head count's phase changes over seeds (``InductionFormation.jump_steps``): 'step 350
    (seed 0), 300 (seed 1), 350 (seed 2); mean 333, range 300-350 (3 of 3 seeds)'."""
    each = ", ".join(f"{'none' if step is None else step} (seed {seed})" for seed, step in found)
    steps = [step for _, step in found if step is not None]
    if not steps:
        return f"none in {len(found)} seed" + "s" * (len(found) != 1)
    spread = f"; mean {sum(steps) / len(steps):.0f}, range {min(steps)}-{max(steps)}"
    return f"step {each}{spread} ({len(steps)} of {len(found)} seeds)"


def _two(value: float) -> str:
    """Two decimals, without the sign of a value that rounds to zero."""
    return f"{value:.2f}".replace("-0.00", "0.00")


def _rho(k, method: str, absolute: bool = False) -> str:
    """Spearman with exact patching, "n/a" under 3 edges (h = 1 has one K edge)."""
    return "n/a" if len(k.edges) < 3 else f"{k.spearman(method, absolute=absolute):.2f}"


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"


def _part(path: Path, pngs: dict[str, bytes]) -> dict | None:
    result = read_result(path, InductionFormation)  # ValueError naming the file and the field
    if result is None:
        return None
    try:
        png = figures.png_bytes(formation_figure(result))
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a formation results file ({error})") from None
    pngs["induction_circuit.png"] = png
    jumps = result.jump_steps()
    seeds = {run.seed for run in result.runs}
    return {
        "seeds": len(seeds),
        "jumps": [f"h = {h}: {jump_text(found)}" for h, found in jumps.items()]
        if len(seeds) > 1
        else [],
        "title": "When the induction circuit forms (the sweep's 2-layer models)",
        "models": [
            f"h = {run.heads}" + (f", seed {run.seed}" if len(seeds) > 1 else "") + f": {run.model}"
            for run in result.runs
        ],
        "rows": [_row(run) for run in result.runs],
        "image": "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
        "command": COMMAND,
    }


__all__ = ["formation_section"]

"""The report's "why heads" answers: read the three results files, draw their figures, and write
one sentence per answer from the measured numbers (the report measures nothing itself)."""

from __future__ import annotations

import base64
from pathlib import Path

from headlab.report import figures, why_figures
from headlab.report.reading import Skipped, skipping
from headlab.results.expressivity_result import ExpressivityResult
from headlab.results.json_store import read_result
from headlab.results.locations import RESULTS_DIR
from headlab.results.redundancy_result import RedundancyResult
from headlab.results.specialisation_result import SpecialisationResult

# key -> (file, the command that makes it, results type, figure)
WHY = {
    "expressivity": (
        "expressivity.json",
        "headlab expressivity",
        ExpressivityResult,
        why_figures.expressivity_figure,
    ),
    "specialisation": (
        "specialisation.json",
        "headlab specialisation",
        SpecialisationResult,
        why_figures.specialisation_figure,
    ),
    "redundancy": (
        "redundancy.json",
        "headlab redundancy",
        RedundancyResult,
        why_figures.redundancy_figure,
    ),
    # the same measurement on a decoder (any: the packaged one in the suggested command; the
    # ranks default to the model's own key/query width / 1, 2, 4, 8, 16)
    "redundancy_decoder": (
        "redundancy_decoder.json",
        "headlab redundancy --model smollm2 --n-texts 16 "
        f"--out {RESULTS_DIR / 'redundancy_decoder.json'}",
        RedundancyResult,
        why_figures.redundancy_figure,
    ),
}
# key -> the section's title; a results file's model name fills {model}
TITLES = {
    "expressivity": "Expressivity: the rank bottleneck and one pattern per head",
    "specialisation": "Specialisation: which head serves which lookup, over training",
    "redundancy": "Redundancy: shared key/query subspaces in {model}",
    "redundancy_decoder": "Redundancy: shared key/query subspaces in {model}",
}
MISSING_MODEL = {"redundancy": "an encoder", "redundancy_decoder": "a decoder"}


def _expressivity_answer(result: ExpressivityResult) -> str:
    random = [r for r in result.rank if r.source == "random"]
    longest = max(r.seq_len for r in random)
    rows = sorted((r for r in random if r.seq_len == longest), key=lambda r: r.head_dim)
    small, full = rows[0], next((r for r in rows if r.head_dim >= longest), rows[-1])
    one, many = result.patterns[0], result.patterns[-1]
    return (
        f"On random {longest} x {longest} patterns a head of {small.head_dim} stays "
        f"{small.kl:.2f} nats away, a head of {full.head_dim} reaches {full.kl:.1e}: "
        f"the floor is set by d_head against n. Copying {one.blocks} offsets at once, "
        f"1 head of {one.head_dim} leaves {one.relative_error:.0%} of the target "
        "unexplained, "
        f"{many.num_heads} heads of {many.head_dim} leave {many.relative_error:.1%}."
    )


def _specialisation_answer(result: SpecialisationResult) -> str:
    parts = []
    for run in result.runs:
        if run.attention != "plain":
            continue
        split = "" if run.split_step is None else f", split at step {run.split_step}"
        parts.append(f"h={run.num_heads}: accuracy {run.accuracy:.2f}{split}")
    return "; ".join(parts) + "."


def _redundancy_answer(result: RedundancyResult) -> str:
    rows = sorted((r for r in result.curve if not r.original), key=lambda r: -r.rank)
    key = "perplexity" if "perplexity" in rows[0].measures else "mean_cosine"
    width = result.qk_width
    cut = ", ".join(f"{width / r.rank:.0f}x: {r.measures[key]:.3g}" for r in rows)
    ranks = ", ".join(f"{layer.effective_rank:.0f}" for layer in result.layers[:12])
    return (
        f"Effective rank per layer (of {width}): {ranks}. "
        f"{key.replace('_', ' ')} with every layer's key/query cut: {cut}."
    )


ANSWERS = {
    "expressivity": _expressivity_answer,
    "specialisation": _specialisation_answer,
    "redundancy": _redundancy_answer,
    "redundancy_decoder": _redundancy_answer,
}


def why_sections(directory: Path, pngs: dict[str, bytes]) -> dict:
    """key -> {title, image, answer, command}, or {title, missing: command, file} (and
    skipped: why, with a SkippedResultsWarning, for a file that breaks its schema)."""
    out = {}
    for key, (filename, command, _, _) in WHY.items():
        path = directory / filename
        part = skipping(path, lambda key=key, path=path: _why_part(key, path, pngs))
        if part is None or isinstance(part, Skipped):
            title = TITLES[key].format(model=MISSING_MODEL.get(key, ""))
            missing = part.part(command) if part else {"missing": command, "file": str(path)}
            part = {"title": title, **missing}
        out[key] = part
    return out


def _why_part(key: str, path: Path, pngs: dict[str, bytes]) -> dict | None:
    """The page's part for one answer (its figure added to ``pngs``), None when its file is
    missing; ValueError naming the file for one that does not follow its schema."""
    _, command, kind, draw = WHY[key]
    result = read_result(path, kind)  # ValueError naming the file and the field
    if result is None:
        return None
    try:
        answer = ANSWERS[key](result)
        png = figures.png_bytes(draw(result))
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a {key} results file ({error})") from None
    pngs[f"{key}.png"] = png
    return {
        "title": TITLES[key].format(model=result.model if key in MISSING_MODEL else ""),
        "image": "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
        "answer": answer,
        "command": command,
    }

"""Assemble the report's sections as plain data: what the template shows and the page script draws.

``collect`` runs the measurements (seed scenarios, gradient coupling, attention on the text) and
reads the results files; each section is either data or ``{"missing": "<command>"}``, which the
page shows as one line saying how to produce it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headlab.defaults import DEFAULT_TEXT
from headlab.locations import RESULTS_DIR
from headlab.report import engine, figures
from headlab.report.heatmap import MAX_BINS, HeatmapView, heatmap_data, synthetic_views, words
from headlab.report.results import PRODUCERS, read_section
from headlab.report.why import why_sections


@dataclass(frozen=True)
class ReportOptions:
    """What goes into a report: the text for the heatmaps, where results files are, the seed."""

    text: str = DEFAULT_TEXT
    results: Path = RESULTS_DIR
    seed: int = 0
    max_bins: int = MAX_BINS
    use_model: bool = True


@dataclass
class Collected:
    """Sections for the template, explorer data for the script, PNG figures by file name."""

    sections: dict
    explorers: dict
    pngs: dict[str, bytes]


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _model_attention(text: str, max_bins: int) -> dict | str | None:
    """The packaged encoder's attention on ``text`` when headlab.models is installed, else None.

    A str is why the encoder could not be loaded (missing weights): the page says so in one line
    instead of failing the whole report over an optional section.
    """
    try:
        from headlab.models import load_encoder
    except ImportError:
        return None
    try:
        encoder = load_encoder()
    except (OSError, ValueError) as error:
        return f"the packaged encoder could not be loaded: {error}"
    views = []
    for label, model in (
        (f"{encoder.num_heads} heads", encoder),
        ("1 head, same weights", encoder.with_num_heads(1)),
    ):
        trace = model.trace(text)
        # layers: list of AttentionTrace with weights (batch=1, head, q_pos, k_pos)
        weights = np.stack([t.weights[0].detach().double().numpy() for t in trace.layers])
        views.append(HeatmapView(label, weights))
    return heatmap_data(
        "The trained encoder's heads on your text",
        list(trace.tokens),
        views,
        note="Attention of the packaged MiniLM encoder, every layer and head, and the same "
        "trained weights viewed as one head per layer (every layer collapsed).",
        max_bins=max_bins,
    )


def _results_sections(directory: Path, pngs: dict[str, bytes]) -> dict:
    out: dict[str, dict] = {}
    readers = (
        ("heads", "model_heads.json", figures.heads_grid),
        ("collapse", "model_collapse.json", figures.collapse_curve),
        ("prune", "model_prune.json", figures.prune_curve),
        ("sweep", "sweep.jsonl", figures.sweep_curve),
    )
    for key, filename, draw in readers:
        data = read_section(directory, filename)
        if not data:
            out[key] = {"missing": PRODUCERS[filename], "file": str(directory / filename)}
            continue
        png = figures.png_bytes(draw(data))
        pngs[f"{key}.png"] = png
        out[key] = {"image": _data_uri(png), "data": data}
    if "data" in out["sweep"]:
        out["sweep"]["table"] = _sweep_table(out["sweep"]["data"])
    if "data" in out["heads"]:
        out["heads"]["summary"] = _heads_summary(out["heads"]["data"])
    return out


def _sweep_table(finals: list[dict]) -> list[dict]:
    """Mean final accuracy per (task, heads), sorted."""
    groups: dict[tuple[str, int], list[float]] = {}
    for r in finals:
        key = (str(r["config"]["task"]), int(r["config"]["num_heads"]))
        groups.setdefault(key, []).append(float(r["accuracy"]))
    return [
        {"task": t, "num_heads": h, "runs": len(v), "accuracy": float(np.mean(v))}
        for (t, h), v in sorted(groups.items())
    ]


def _heads_summary(heads: dict) -> list[dict]:
    """For each metric: the head with the largest value (layer, head, value)."""
    rows = []
    for name, grid in heads["metrics"].items():
        g = np.asarray(grid)
        layer, head = np.unravel_index(int(np.argmax(g)), g.shape)
        rows.append(
            {"metric": name, "layer": int(layer), "head": int(head), "value": float(g.max())}
        )
    return rows


def collect(options: ReportOptions, *, want_png: bool = False) -> Collected:
    """Measure and read everything the page shows. ValueError for an empty text or bad files."""
    tokens = words(options.text)
    pngs: dict[str, bytes] = {}
    explorers: dict[str, dict] = {}

    views = synthetic_views(tokens, seed=options.seed, max_bins=options.max_bins)
    explorers["text"] = heatmap_data(
        "Your text through one attention layer",
        tokens,
        views,
        note=(
            "Seeded embeddings of the words through a seeded headlab.MultiHeadAttention "
            "(d_model=64) and the same parameters viewed as one head."
        ),
        max_bins=options.max_bins,
    )
    if want_png:
        pngs["attention.png"] = figures.png_bytes(
            figures.attention_figure("Attention per head on the text", tokens, views)
        )
    model = _model_attention(options.text, options.max_bins) if options.use_model else None
    if isinstance(model, dict):
        explorers["model"] = model

    scenarios = engine.seed_scenarios(seed=options.seed)
    for i, scenario in enumerate(scenarios or []):
        explorers[f"scenario-{i}"] = scenario.pop("heatmap")
        scenario["explorer"] = f"scenario-{i}"

    coupling = engine.coupling(seed=options.seed)
    if coupling is not None and want_png:
        pngs["coupling.png"] = figures.png_bytes(figures.coupling_figure(coupling["matrices"]))

    sections = {
        "text": options.text,
        "num_tokens": len(tokens),
        "binned": explorers["text"]["bins"] < len(tokens),
        "bins": explorers["text"]["bins"],
        "has_model": isinstance(model, dict),
        "model_problem": model if isinstance(model, str) else None,
        "scenarios": scenarios,
        "params": engine.parameter_rows(),
        "coupling": coupling,
        "results": _results_sections(Path(options.results), pngs),
        "why": why_sections(Path(options.results), pngs),
        "results_dir": str(options.results),
    }
    return Collected(sections=sections, explorers=explorers, pngs=pngs)

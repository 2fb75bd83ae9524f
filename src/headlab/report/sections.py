"""Assemble the report's sections as plain data: what the template shows and the page script draws.

``collect`` calls the analyses (``headlab.analysis``: seed scenarios, gradient coupling, attention
on the text), reads the results files and turns both into figures and page data; it measures
nothing itself. Each results section is either data or ``{"missing": "<command>"}``, which the
page shows as one line saying which command fills it.
"""

from __future__ import annotations

import base64
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headlab.analysis.binning import MAX_BINS
from headlab.analysis.coupling import coupling_summary
from headlab.analysis.params import parameter_table
from headlab.analysis.text_attention import (
    TextAttention,
    seeded_text_attention,
    words,
)
from headlab.defaults import DEFAULT_TEXT
from headlab.experiments.summary import summarize
from headlab.notices import HeadlabWarning
from headlab.report import figures, heatmap
from headlab.report.circuits import circuits_sections
from headlab.report.heatmap import heatmap_data
from headlab.report.long_context import long_context_sections
from headlab.report.overview import overview
from headlab.report.reading import PRODUCERS, Skipped, read_section, skipping
from headlab.report.scenarios import seed_scenarios
from headlab.report.why import why_sections
from headlab.results.locations import RESULTS_DIR

DEFAULT_MODEL = "minilm"
#: The most words of the text the report takes: the seeded layer's work grows with the square of
#: the words (4096: about 6 s on two busy cores; 100,000 words ran for minutes), and the page shows
#: every word it takes.
REPORT_MAX_WORDS = 4096


class TextCutWarning(HeadlabWarning):
    """The report cut the text, or drew a view coarser, to bound its work and its page."""


def first_words(text: str, count: int) -> str:
    """``text`` up to the end of its ``count``-th whitespace word, as written."""
    ends = [match.end() for match, _ in zip(re.finditer(r"\S+", text), range(count), strict=False)]
    return text[: ends[-1]] if ends else ""


@dataclass(frozen=True)
class ReportOptions:
    """What goes into a report: the text for the heatmaps, where results files are, the seed."""

    text: str = DEFAULT_TEXT
    results: Path = RESULTS_DIR
    seed: int = 0
    max_bins: int = MAX_BINS
    use_model: bool = True
    #: The trained model whose heads are shown on the text: a name of ``headlab.models.load``
    #: ("minilm", "smollm2"), a path or a hub id, and how it is loaded (``load``'s options).
    model: str = DEFAULT_MODEL
    backend: str | None = None
    download: bool = False
    trust_remote_code: bool = False
    #: The file ``text`` was read from, if any: an input, like ``results`` and a model path.
    text_file: Path | None = None

    def inputs(self) -> tuple[Path, ...]:
        """Every path the report reads: a folder holding one is never replaced by the report."""
        model = Path(self.model)
        paths = (self.results, self.text_file, model if model.exists() else None)
        return tuple(Path(p) for p in paths if p is not None)


@dataclass
class Collected:
    """Sections for the template, explorer data for the script, PNG figures by file name."""

    sections: dict
    explorers: dict
    pngs: dict[str, bytes]


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _model_attention(text: str, options: ReportOptions) -> tuple[str, TextAttention] | str:
    """(the model's name, its attention on ``text``), or why the default model could not be
    loaded (its packaged weights missing): the page then says so in one line instead of failing
    the whole report. A model the user named that cannot be loaded is an error."""
    from headlab.heads.text_attention import model_text_attention
    from headlab.models import load

    model_name = options.model
    try:
        model = load(model_name, backend=options.backend, download=options.download,
                     trust_remote_code=options.trust_remote_code)  # fmt: skip
    except (OSError, ValueError) as error:
        if model_name != DEFAULT_MODEL or options.backend is not None:
            raise
        return f"the model {model_name} could not be loaded: {error}"
    return model.name, model_text_attention(model, text)


def _say(message: str) -> None:
    warnings.warn(message, TextCutWarning, stacklevel=3)


def _model_explorer(name: str, attention: TextAttention, max_bins: int) -> dict:
    """The model's explorer: every layer and head, binned coarser when their cells would not fit
    the page's budget (``heatmap.PAGE_BYTES``), which the page and a TextCutWarning say. A text
    cut to the page's or the model's limit is said on the page ("Cut to 256 of 9484 tokens: the
    page shows at most 256 of the 8192 tokens SmolLM2-135M-Instruct reads")."""
    one_head = (
        ", and the same trained weights viewed as one head per layer (every layer collapsed)"
        if len(attention.views) > 1
        else ""
    )
    note = f"Attention of {name}, every layer and head{one_head}."
    grids = [view.weights.shape[0] * view.weights.shape[1] for view in attention.views]
    bins = heatmap.bins_within(sum(grids), max_bins)
    if bins < min(len(attention.tokens), max_bins):
        per_cell = len(attention.tokens) / bins
        # the first view is the model's own heads; the others are its layers collapsed
        shown = f"{grids[0]} heads" + (
            f" and their {sum(grids[1:])} one-head views" if len(grids) > 1 else ""
        )
        note += (f" Binned to {bins} x {bins} cells (about {per_cell:.1f} tokens a cell) so that "
                 f"its {shown} fit the page.")  # fmt: skip
        _say(f"{name}'s {shown} are binned to {bins} x {bins} cells on the page, so that the "
             f"explorer's weights take at most {heatmap.PAGE_BYTES / 2**20:g} MiB")  # fmt: skip
    return heatmap_data(
        f"{name}'s heads on your text",
        attention.tokens,
        attention.views,
        note=note,
        max_bins=bins,
        total_tokens=attention.total_tokens,
        cut_reason=attention.cut_reason,
    )


def _parameter_rows(d_model: int = 512) -> list[dict]:
    """Full multi-head rows for 1..16 heads, then 8 heads with 4, 2, 1 K/V heads (GQA, MQA)."""
    rows = parameter_table(d_model, [1, 2, 4, 8, 16]) + parameter_table(d_model, [8], [4, 2, 1])
    return [r.to_dict() for r in rows]


def _sweep_figure(finals: list[dict]):
    return figures.sweep_figure(summarize(finals))


def _results_sections(directory: Path, pngs: dict[str, bytes]) -> dict:
    out: dict[str, dict] = {}
    readers = (
        ("heads", "model_heads.json", figures.heads_grid),
        ("collapse", "model_collapse.json", figures.collapse_curve),
        ("prune", "model_prune.json", figures.prune_curve),
        ("sweep", "sweep.jsonl", _sweep_figure),
    )
    for key, filename, draw in readers:
        # Read and drawn under ``skipping``: a file whose data cannot be drawn is one line.
        part = skipping(directory / filename, lambda k=key, f=filename, d=draw: _part(
            directory, k, f, d))  # fmt: skip
        if isinstance(part, Skipped):
            out[key] = part.part(PRODUCERS[filename])
        elif part is None:
            out[key] = {"missing": PRODUCERS[filename], "file": str(directory / filename)}
        else:
            pngs[f"{key}.png"] = part.pop("png")
            out[key] = part
    return out


def _part(directory: Path, key: str, filename: str, draw) -> dict | None:
    """One results part: its data, figure (``png``) and tables; None when the file is absent."""
    data = read_section(directory, filename)
    if not data:
        return None
    png = figures.png_bytes(draw(data))
    part = {"png": png, "image": _data_uri(png), "data": data}
    if key == "sweep":
        part["table"] = [r.to_dict() for r in summarize(data)]
    if key == "heads":
        part["summary"] = _heads_summary(data)
        part["overview"] = overview(data)
    return part


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


# page section -> (where its parts are in the sections, the parts' keys)
GROUPS = {
    "model": ("results", ("heads", "collapse", "prune")),
    "sweeps": ("results", ("sweep",)),
    "why": ("why", ("expressivity", "specialisation", "redundancy", "redundancy_decoder")),
    "long": ("long", ("roles", "kv_budget")),
    "circuits": ("circuits", ("circuits",)),
}


def _empty_sections(sections: dict) -> dict[str, list[str]]:
    """Page section -> the commands that fill it, for the sections none of whose parts has
    results yet (the page shows each as one line)."""
    out = {}
    for name, (where, keys) in GROUPS.items():
        parts = [sections[where][key] for key in keys]
        if all("missing" in part and "skipped" not in part for part in parts):
            out[name] = [part["missing"] for part in parts]
    return out


def collect(options: ReportOptions, *, want_png: bool = False) -> Collected:
    """Call the analyses and read everything the page shows. ValueError for an empty text or
    bad files."""
    tokens = words(options.text)
    total_words, shown_text = len(tokens), options.text
    text_cut = total_words > REPORT_MAX_WORDS
    if text_cut:
        tokens, shown_text = tokens[:REPORT_MAX_WORDS], first_words(options.text, REPORT_MAX_WORDS)
        _say(
            f"the text has {total_words} words; the report takes the first {REPORT_MAX_WORDS} "
            "(the seeded layer's work grows with the square of the words)"
        )
    # First: a model the user named that cannot be loaded fails before the other work.
    model = _model_attention(shown_text, options) if options.use_model else None
    pngs: dict[str, bytes] = {}
    explorers: dict[str, dict] = {}

    text = seeded_text_attention(tokens, seed=options.seed, max_bins=options.max_bins)
    explorers["text"] = heatmap_data(
        "Your text through one attention layer",
        tokens,
        text.views,
        note=(
            "Seeded embeddings of the words through a seeded headlab.MultiHeadAttention "
            "(d_model=64) and the same parameters viewed as one head."
        ),
        max_bins=options.max_bins,
        total_tokens=total_words,
        cut_reason=f"the report takes at most {REPORT_MAX_WORDS} words" if text_cut else "",
    )
    if want_png:
        pngs["attention.png"] = figures.png_bytes(
            figures.attention_figure("Attention per head on the text", tokens, text.views)
        )
    if isinstance(model, tuple):
        explorers["model"] = _model_explorer(*model, options.max_bins)

    scenarios = seed_scenarios(seed=options.seed)
    for i, scenario in enumerate(scenarios):
        explorers[f"scenario-{i}"] = scenario.pop("heatmap")
        scenario["explorer"] = f"scenario-{i}"

    coupling = coupling_summary(seed=options.seed).to_dict()
    if want_png:
        pngs["coupling.png"] = figures.png_bytes(figures.coupling_figure(coupling))

    sections = {
        "text": shown_text + (" …" if text_cut else ""),
        "num_tokens": len(tokens),
        "binned": explorers["text"]["bins"] < len(tokens),
        "bins": explorers["text"]["bins"],
        "has_model": "model" in explorers,
        "model_problem": model if isinstance(model, str) else None,
        "model_name": model[0] if isinstance(model, tuple) else None,
        "scenarios": scenarios,
        "params": _parameter_rows(),
        "coupling": coupling,
        "coupling_top": max(max(map(max, m["matrix"])) for m in coupling["matrices"]),
        "results": _results_sections(Path(options.results), pngs),
        "why": why_sections(Path(options.results), pngs),
        "long": long_context_sections(Path(options.results), pngs, explorers),
        "circuits": circuits_sections(Path(options.results), pngs),
        "results_dir": str(options.results),
    }
    sections["empty"] = _empty_sections(sections)
    return Collected(sections=sections, explorers=explorers, pngs=pngs)

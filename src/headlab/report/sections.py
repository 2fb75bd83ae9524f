"""Assemble the report's sections as plain data: what the template shows and the page script draws.

``collect`` reads what was measured for the page (``ReportMeasurements``: seed scenarios,
gradient coupling, attention on the text) and the results files, and turns both into figures and
page data; it measures nothing. Each results section is either data or
``{"missing": "<command>"}``, which the page shows as one line saying which command fills it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from headlab.report import figures
from headlab.report.circuits_section import circuits_sections
from headlab.report.displays import show
from headlab.report.kinds_section import kinds_sections
from headlab.report.long_context_section import long_context_sections
from headlab.report.reading import PRODUCERS, Skipped, read_section, skipping
from headlab.report.why import why_sections
from headlab.results.explorers import decoded_views
from headlab.results.head_statistics import HeadStatistics
from headlab.results.report_measurements import ReportMeasurements, ReportRequest
from headlab.results.sweep_summary import summarize


@dataclass
class Collected:
    """Sections for the template, explorer data for the script, PNG figures by file name."""

    sections: dict
    explorers: dict
    pngs: dict[str, bytes]


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _sweep_figure(finals: list[dict]):
    return figures.sweep_figure(summarize(finals))


def _results_sections(
    directory: Path, pngs: dict[str, bytes], roles: dict | None = None, want_png: bool = True
) -> dict:
    """The trained model's parts and the sweeps' (``roles``: the long-context section's roles
    part, shown with the heads of the same model; ``want_png``: also the heads' figure)."""
    roles = roles or {}
    out: dict[str, dict] = {}
    readers = (
        ("heads", "model_heads.json", figures.heads_grid),
        ("collapse", "model_collapse.json", figures.collapse_curve),
        ("prune", "model_prune.json", figures.prune_curve),
        ("sweep", "sweep.jsonl", _sweep_figure),
    )
    for key, filename, draw in readers:
        # Read and drawn under ``skipping``: a file whose data cannot be drawn is one line.
        part = skipping(
            directory / filename,
            lambda k=key, f=filename, d=draw: _part(directory, k, f, d, roles, want_png),
        )
        if isinstance(part, Skipped):
            out[key] = part.part(PRODUCERS[filename])
        elif part is None:
            out[key] = {"missing": PRODUCERS[filename], "file": str(directory / filename)}
        else:
            png = part.pop("png")
            if png is not None:
                pngs[f"{key}.png"] = png
            out[key] = part
    return out


def _part(
    directory: Path, key: str, filename: str, draw, roles: dict, want_png: bool
) -> dict | None:
    """One results part: its data and figure (``png``; the heads: their display, and their
    figure for the figures folder only) and tables; None when the file is absent."""
    data = read_section(directory, filename)
    if not data:
        return None
    if key == "heads":
        stats = HeadStatistics.from_dict(data)
        grid = _roles_of(stats, roles)
        return {
            "png": figures.png_bytes(draw(data)) if want_png else None,
            "data": data,
            "roles_tokens": roles["n_tokens"] if grid else None,
            "display": show(stats, roles=grid).html(),  # the notebook's display
        }
    png = figures.png_bytes(draw(data))
    part = {"png": png, "image": _data_uri(png), "data": data}
    if key == "sweep":
        part["table"] = [r.to_dict() for r in summarize(data)]
    return part


def _roles_of(stats: HeadStatistics, roles: dict) -> list[list[str]] | None:
    """Each head's role (from the long-context run), shown with the statistics, when both
    were measured on the same model with the same layers and heads."""
    grid = roles.get("role_grid")
    if grid is None or roles.get("model") != stats.model:
        return None
    heads = [len(row) for row in next(iter(stats.metrics.values()))]
    return grid if [len(row) for row in grid] == heads else None


# page section -> (where its parts are in the sections, the parts' keys)
GROUPS = {
    "model": ("results", ("heads", "collapse", "prune")),
    "kinds": ("kinds", ("cross", "vision")),
    "sweeps": ("results", ("sweep",)),
    "why": ("why", ("expressivity", "specialisation", "redundancy", "redundancy_decoder")),
    "long": ("long", ("roles", "kv_budget")),
    "circuits": ("circuits", ("circuits", "formation", "attends", "attends_all", "nodes")),
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


def collect(
    options: ReportRequest, measured: ReportMeasurements, *, want_png: bool = False
) -> Collected:
    """Read everything the page shows: ``measured`` (what ``headlab.analysis.report_measuring``
    measured for it) and the results files in ``options.results``. ValueError for bad files."""
    explorers = dict(measured.explorers)
    pngs: dict[str, bytes] = {}
    if want_png:
        tokens = explorers["text"]["tokens"]
        views = decoded_views(explorers["text"])
        pngs["attention.png"] = figures.png_bytes(
            figures.attention_figure("Attention per head on the text", tokens, views)
        )
    coupling = measured.coupling
    if want_png:
        pngs["coupling.png"] = figures.png_bytes(figures.coupling_figure(coupling))
    sections = {
        "text": measured.text + (" …" if measured.text_cut else ""),
        "num_tokens": measured.num_tokens,
        "binned": explorers["text"]["bins"] < measured.num_tokens,
        "bins": explorers["text"]["bins"],
        "has_model": "model" in explorers,
        "model_problem": measured.model_problem,
        "model_name": measured.model_name,
        "scenarios": [dict(scenario) for scenario in measured.scenarios],
        "params": measured.params,
        "coupling": coupling,
        "coupling_top": max(max(map(max, m["matrix"])) for m in coupling["matrices"]),
        "why": why_sections(Path(options.results), pngs),
        "long": long_context_sections(Path(options.results), pngs, figures=want_png),
        "circuits": circuits_sections(Path(options.results), pngs, figures=want_png),
        "kinds": kinds_sections(Path(options.results)),
        "results_dir": str(options.results),
    }
    sections["results"] = _results_sections(
        Path(options.results), pngs, sections["long"]["roles"], want_png
    )
    sections["empty"] = _empty_sections(sections)
    return Collected(sections=sections, explorers=explorers, pngs=pngs)

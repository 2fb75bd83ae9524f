"""Build the report: collect the sections, render one self-contained HTML page, move it into place.

The page is built in a temporary directory next to the target and renamed into place, so a
reader never sees half a report. Where a report may go is ``headlab.report.target``'s rule.
What was measured for the page (``ReportMeasurements``) is written into that folder first, as
``measurements.json``, and the page is drawn from that file and the results folder: the report
reads results files and measures nothing.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from headlab import __version__
from headlab.report.displays.display_bundle import page_code, safe_json
from headlab.report.sections import Collected, collect
from headlab.report.target import (
    FIGURES_MARKER,
    REPORT_MARKER,
    FolderKind,
    check_folder,
    inside,
    new_folder,
    swap_into_place,
    write_marker,
)
from headlab.results.atomic_files import atomic_write_bytes
from headlab.results.json_store import read_result, write_result
from headlab.results.output_policy import OutputRefused
from headlab.results.report_measurements import ReportMeasurements, ReportRequest

MARKER = REPORT_MARKER
MEASUREMENTS = "measurements.json"  # beside index.html: what the page shows beside the results


def _heat(value: float, top: float) -> str:
    """A CSS background for a table cell: white at 0, deep orange at ``top``."""
    share = 0.0 if top <= 0 else min(1.0, abs(value) / top)
    return f"background: rgba(228, 87, 46, {0.08 + 0.8 * share:.3f})" if share > 0 else ""


def _static(name: str) -> str:
    return resources.files("headlab.report").joinpath("static", name).read_text(encoding="utf-8")


def render(collected: Collected) -> str:
    """The page as one HTML string: CSS, script, data and images inline."""
    env = Environment(
        loader=PackageLoader("headlab.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["heat"] = _heat
    template = env.get_template("report.html.j2")
    return template.render(
        s=collected.sections,
        version=__version__,
        # Our own package files and escaped JSON: Markup tells autoescape not to touch them.
        css=Markup(_static("report.css")),
        script=Markup(_static("report.js")),
        data=Markup(safe_json({"explorers": collected.explorers})),
        # the displays' drawers and styles, once, after every display (report/displays)
        display_code=Markup(page_code()),
    )


REPORT = FolderKind(MARKER, "report", "out")
FIGURES = FolderKind(FIGURES_MARKER, "figures folder", "png")


def _build_folder(
    files: dict[str, bytes], target: Path, kind: FolderKind, tmp: Path | None = None
) -> Path:
    """A temporary folder beside ``target`` (or ``tmp``, made by ``new_folder``) holding
    ``files`` and the marker listing them."""
    tmp = new_folder(target) if tmp is None else tmp
    try:
        for name, data in files.items():
            atomic_write_bytes(tmp / name, data)
        write_marker(tmp, kind, f"headlab {__version__} {kind.what}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def check_targets(
    out: Path | str, options: ReportRequest, *, force: bool = False, png: Path | str | None = None
) -> tuple[Path, Path | None]:
    """The report's folder and the figures' folder (None without ``png``), checked: OutputRefused
    (a ValueError) when either may not be written (``headlab.report.target``). ``headlab report``
    calls it before measuring; ``build_report`` again before it writes."""
    inputs = options.inputs()
    target = check_folder(out, REPORT, inputs=inputs, force=force)
    figures = None if png is None else check_folder(png, FIGURES, inputs=inputs, force=force)
    if figures is not None and (inside(figures, target) or inside(target, figures)):
        raise OutputRefused(f"png={png} and out={out} must be separate folders")
    return target, figures


def build_report(
    out: Path | str,
    options: ReportRequest,
    measured: ReportMeasurements,
    *,
    force: bool = False,
    png: Path | str | None = None,
) -> Path:
    """Build the report into ``out`` from ``measured`` (``measure_report(options)``) and the
    results files in ``options.results``; return the path of ``out/index.html``.

    png: also write every figure as a PNG into this directory.
    Raises OutputRefused (a ValueError) before any work when ``out`` or ``png`` may not be
    written (see ``headlab.report.target``); ValueError for a results file that breaks its
    schema.
    """
    inputs = options.inputs()
    target, figures = check_targets(out, options, force=force, png=png)
    report = new_folder(target)
    pictures = None
    try:
        stored = report / MEASUREMENTS
        write_result(stored, measured)
        collected = collect(
            options, read_result(stored, ReportMeasurements), want_png=png is not None
        )
        html = render(collected)
        _build_folder({"index.html": html.encode("utf-8")}, target, REPORT, report)
        pictures = None if figures is None else _build_folder(collected.pngs, figures, FIGURES)
        swap_into_place(report, target, REPORT, inputs=inputs, force=force)
        if pictures is not None:
            swap_into_place(pictures, figures, FIGURES, inputs=inputs, force=force)
    finally:
        for leftover in (report, pictures):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
    return Path(out) / "index.html"

"""Build the report: collect the sections, render one self-contained HTML page, move it into place.

The page is built in a temporary directory next to the target and renamed into place, so a
reader never sees half a report. Where a report may go is ``headlab.report.target``'s rule.
"""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from headlab import __version__
from headlab.report.sections import Collected, ReportOptions, collect
from headlab.report.target import (
    FolderKind,
    check_folder,
    inside,
    new_folder,
    swap_into_place,
    write_marker,
)
from headlab.results.files import atomic_write_bytes
from headlab.results.locations import REPORT_DIR
from headlab.results.output_policy import OutputRefused

MARKER = ".headlab-report"
FIGURES_MARKER = ".headlab-figures"


def safe_json(data: object) -> str:
    """JSON that can sit inside a <script> element: <, >, & (and U+2028/9) escaped as \\uXXXX.

    A token such as ``</script><img src=x onerror=...>`` then stays inside the JSON string.
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escaped in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


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
    )


REPORT = FolderKind(MARKER, "report", "out")
FIGURES = FolderKind(FIGURES_MARKER, "figures folder", "png")


def _build_folder(files: dict[str, bytes], target: Path, kind: FolderKind) -> Path:
    """A temporary folder beside ``target`` holding ``files`` and the marker listing them."""
    tmp = new_folder(target)
    try:
        for name, data in files.items():
            atomic_write_bytes(tmp / name, data)
        write_marker(tmp, kind, f"headlab {__version__} {kind.what}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def build_report(
    out: Path | str = REPORT_DIR,
    options: ReportOptions | None = None,
    *,
    force: bool = False,
    png: Path | str | None = None,
) -> Path:
    """Build the report into ``out``; return the path of ``out/index.html``.

    png: also write every figure as a PNG into this directory.
    Raises OutputRefused (a ValueError) before any work when ``out`` or ``png`` may not be
    written (see ``headlab.report.target``); ValueError for an empty text or a results file
    that breaks its schema.
    """
    options = options or ReportOptions()
    inputs = options.inputs()
    # Refusals before the work; the warning about deleted files comes once, from the swap.
    target = check_folder(out, REPORT, inputs=inputs, force=force, warn=False)
    figures = (
        None if png is None else check_folder(png, FIGURES, inputs=inputs, force=force, warn=False)
    )
    if figures is not None and (inside(figures, target) or inside(target, figures)):
        raise OutputRefused(f"png={png} and out={out} must be separate folders")
    collected = collect(options, want_png=png is not None)
    html = render(collected)

    report = _build_folder({"index.html": html.encode("utf-8")}, target, REPORT)
    pictures = None if figures is None else _build_folder(collected.pngs, figures, FIGURES)
    try:
        swap_into_place(report, target, REPORT, inputs=inputs, force=force)
        if pictures is not None:
            swap_into_place(pictures, figures, FIGURES, inputs=inputs, force=force)
    finally:
        for leftover in (report, pictures):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
    return Path(out) / "index.html"

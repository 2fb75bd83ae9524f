"""Build the report: collect the sections, render one self-contained HTML page, move it into place.

The page is built in a temporary directory next to the target and renamed into place, so a
reader never sees half a report. A target directory that exists and was not written by headlab
(no ``.headlab-report`` marker inside) is never replaced without ``force``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from headlab import __version__
from headlab.files import atomic_write_bytes
from headlab.report.sections import Collected, ReportOptions, collect

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


def _check_target(path: Path, marker: str, force: bool, what: str) -> None:
    if not path.exists():
        return
    if not path.is_dir():
        if force:
            return
        raise FileExistsError(f"{path} exists and is not a directory; pass --force to replace it")
    if any(path.iterdir()) and not (path / marker).is_file() and not force:
        raise FileExistsError(
            f"{path} exists and is not a headlab {what} (no {marker} inside); "
            "choose another directory or pass --force to replace it"
        )


def _swap_into_place(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``; an old ``target`` is moved aside first, then deleted."""
    if not target.exists():
        os.replace(tmp, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    aside = old / "previous"
    os.replace(target, aside)
    try:
        os.replace(tmp, target)
    except OSError:
        os.replace(aside, target)  # put the old report back
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def _write_pngs(pngs: dict[str, bytes], directory: Path, force: bool) -> None:
    """Write each figure atomically into ``directory`` (created; marked as ours)."""
    _check_target(directory, FIGURES_MARKER, force, "figures directory")
    if directory.exists() and not directory.is_dir():
        directory.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    for name, png in {**pngs, FIGURES_MARKER: b"headlab figures\n"}.items():
        atomic_write_bytes(directory / name, png)


def build_report(
    out: Path | str = "headlab-report",
    options: ReportOptions | None = None,
    *,
    force: bool = False,
    png: Path | str | None = None,
) -> Path:
    """Build the report into ``out``; return the path of ``out/index.html``.

    png: also write every figure as a PNG into this directory.
    Raises FileExistsError when ``out`` (or ``png``) exists and is not ours, unless ``force``;
    ValueError for an empty text or a results file that breaks its schema.
    """
    out = Path(out)
    options = options or ReportOptions()
    _check_target(out, MARKER, force, "report")
    if png is not None:
        _check_target(Path(png), FIGURES_MARKER, force, "figures directory")
    collected = collect(options, want_png=png is not None)
    html = render(collected)

    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp.", dir=parent))
    try:
        (tmp / "index.html").write_text(html, encoding="utf-8")
        (tmp / MARKER).write_text(f"headlab {__version__} report\n", encoding="utf-8")
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700; a report is meant to be shared
        if out.exists() and not out.is_dir():
            out.unlink()  # only reached with force (checked above)
        _swap_into_place(tmp, out.absolute())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if png is not None:
        _write_pngs(collected.pngs, Path(png), force)
    return out / "index.html"

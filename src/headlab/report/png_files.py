"""Figures as PNG files: rendered with every text verbatim, tagged with what headlab wrote, and
written under the output policy (``headlab.results.atomic_files.write_output``).

The report embeds ``figure_png``'s bytes; every ``--figure`` of the CLI is ``save_figure``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from headlab.results.atomic_files import write_output
from headlab.results.output_policy import Kind


def figure_png(figure: Any, kind_name: str, **savefig: Any) -> bytes:
    """Render a matplotlib figure to PNG bytes tagged as headlab's ``kind_name``; close it.

    Every text is drawn verbatim: a user's ``$x^$`` is not read as TeX (mathtext).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    if not isinstance(figure.canvas, FigureCanvasAgg):
        FigureCanvasAgg(figure)
    for text in figure.findobj(Text):
        text.set_parse_math(False)
    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", metadata={"headlab": kind_name}, **savefig)
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)
    return buffer.getvalue()


def save_figure(
    figure: Any,
    path: str | Path,
    kind: Kind,
    *,
    force: bool = False,
    argument: str = "path",
    **savefig: Any,
) -> Path:
    """Render a figure to PNG and write it under the output policy (``kind`` must be a PNG kind);
    a refusal names ``path`` as ``argument``."""
    png = figure_png(figure, kind.name, **savefig)
    return write_output(path, png, kind, force=force, argument=argument)


__all__ = ["figure_png", "save_figure"]

"""What every display is made of, in the notebook and in the report alike.

A display is plain data for one drawer of ``static/displays.js`` (``Display``: its kind, its
data, a one-line summary): HTML of a ``div`` holding the data as escaped JSON, a static fallback
(the summary) for a page that runs no script, and a one-line script that asks the drawers to draw
every display not drawn yet. The drawers and their styles (``page_code``) travel once per page:
once per kernel in a notebook (the first display carries them; ``send_code_again`` makes the next
one carry them again, after the outputs that held them were cleared), once at the end of the
report. Nothing is loaded from anywhere: the page makes no request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from html import escape
from importlib import resources

#: Whether this kernel has sent the drawers already (``Display._repr_html_``).
_SENT = {"code": False}


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


@cache
def _static(name: str) -> str:
    return resources.files("headlab.report").joinpath("static", name).read_text(encoding="utf-8")


#: The drawers, in order: ``kinds_displays.js`` queues its drawers for ``displays.js``, which
#: holds the shared helpers and the smaller drawers and makes ``window.headlabDisplays``; then one
#: file per larger drawer, which adds itself to it.
DRAWERS = (
    "kinds_displays.js",
    "displays.js",
    "pattern.js",
    "circuit.js",
    "score_split.js",
    "node_scores.js",
)


def page_code() -> str:
    """The drawers and their styles, as HTML: once per page, before or after the displays."""
    code = "\n".join(_static(name) for name in DRAWERS)
    code += "\nwindow.headlabDisplays.drawAll();"
    return (
        f'<style data-headlab-code="css">{_static("displays.css")}</style>'
        f'<script data-headlab-code="js">{code}</script>'
    )


def send_code_again() -> None:
    """Make the next display in this kernel carry the drawers again (after the output that held
    them was cleared, or in a new page of the same kernel)."""
    _SENT["code"] = False


# The display's own script draws its display (``currentScript``'s parent: JupyterLab and VS Code
# run a copy of each script in its place), or every display not drawn yet where a page runs its
# scripts apart (classic Notebook's jQuery); nothing before the drawers have come.
DRAW = (
    "<script>(function (s) { var d = window.headlabDisplays, r = s && s.parentNode; if (!d) return;"
    " if (r && r.classList && r.classList.contains('hl-display')) d.draw(r); else d.drawAll();"
    " })(document.currentScript);</script>"
)


@dataclass(frozen=True)
class Display:
    """``data`` for the drawer ``kind`` of ``static/displays.js``; ``summary``: one line, the
    plain-text repr and what a page without scripts shows; ``test_id``: the page's name for it."""

    kind: str
    data: dict = field(repr=False)
    summary: str
    test_id: str = ""

    def html(self, *, code: bool = False) -> str:
        """The display as HTML; ``code``: with the drawers (``page_code``) in front."""
        name = self.test_id or f"display-{self.kind}"
        body = (
            f'<div class="hl-display" data-hl-kind="{escape(self.kind)}" '
            f'data-testid="{escape(name)}">'
            f'<p class="hl-fallback">{escape(self.summary)} (headlab\u2019s display code did not '
            "run in this page: trust the notebook, or call "
            "<code>headlab.report.displays.send_code_again()</code> and show it again)</p>"
            f'<script type="application/json" class="hl-data">{safe_json(self.data)}</script>'
            f"{DRAW}</div>"
        )
        return (page_code() if code else "") + body

    def _repr_html_(self) -> str:
        code = not _SENT["code"]
        _SENT["code"] = True
        return self.html(code=code)

    def __repr__(self) -> str:
        return self.summary

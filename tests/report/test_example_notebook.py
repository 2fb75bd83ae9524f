"""The example notebook (docs/notebook.ipynb: SmolLM2's statistics, one induction head's pattern,
its circuit and its score split), executed offline by a kernel (nbclient), exported
to HTML as nbconvert does and opened as a file in chromium with the network blocked: each display
present and drawn, no console error, no request, hover and selection working. The notebook is
committed without outputs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from display_browser import Offline, chromium

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "notebook.ipynb"

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.browser]


def test_the_notebook_is_committed_without_outputs():
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


#: What nbconvert's default HTML template itself loads from the network (not headlab's).
NBCONVERT_CDN = (
    "https://cdnjs.cloudflare.com/ajax/libs/mathjax/",
    "https://cdnjs.cloudflare.com/ajax/libs/require.js/",
)


@pytest.fixture(scope="module")
def executed() -> object:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel inherits the offline environment (HF_HUB_OFFLINE: nothing is downloaded).
    NotebookClient(notebook, timeout=3600, kernel_name="python3").execute()
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    return notebook


def export(notebook: object, folder: Path, **options: str) -> Path:
    """The notebook as nbconvert's HTMLExporter writes it (``options``: its settings)."""
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter(**options).from_notebook_node(notebook)
    path = folder / "notebook.html"
    path.write_text(html, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def exported(executed: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The export with nbconvert's own MathJax and require.js left out: a page that loads
    nothing at all."""
    folder = tmp_path_factory.mktemp("notebook")
    return export(executed, folder, mathjax_url="", require_js_url="")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as instance:
        yield instance


def test_each_display_output_holds_what_every_front_end_reads(executed):
    """JupyterLab, classic Notebook and VS Code all render an output's text/html (scripts run
    where the notebook is trusted) and fall back to its text/plain: each display is one output
    of exactly those two, the drawers in the first alone, and nothing that points off the page."""
    outputs = [
        o
        for c in executed.cells
        for o in c.get("outputs", [])
        if 'class="hl-display"' in o.get("data", {}).get("text/html", "")
    ]
    assert len(outputs) == 4
    for i, output in enumerate(outputs):
        assert output.output_type in ("execute_result", "display_data")
        assert set(output.data) == {"text/html", "text/plain"}
        assert "\n" not in output.data["text/plain"] and len(output.data["text/plain"]) < 300
        html = output.data["text/html"]
        assert html.count('data-headlab-code="js"') == (1 if i == 0 else 0)
        assert " src=" not in html and "href=" not in html and "import(" not in html


def test_the_exported_notebook_draws_offline(browser, exported):
    html = exported.read_text(encoding="utf-8")
    assert html.count('data-headlab-code="js"') == 1  # the drawers once, in the first display
    opened = Offline(browser, exported)
    page = opened.page
    kinds = page.eval_on_selector_all(
        ".hl-display", "ds => ds.map(d => [d.dataset.hlKind, !!d.dataset.hlDrawn])"
    )
    assert kinds == [["heads", True], ["pattern", True], ["circuit", True], ["score-split", True]]
    # the plain-text repr printed in the notebook is one line
    assert "HeadStatistics('SmolLM2-135M-Instruct'" in page.inner_text("body")

    # the induction detector first: its heatmap, and the table sorted by it, strongest first
    sorted_by = page.locator("[data-testid=heads-table] th.sorted").inner_text()
    assert sorted_by == "induction \u25be"
    first = page.locator("[data-testid=heads-table] tbody tr").first
    layer, head = first.get_attribute("data-layer"), first.get_attribute("data-head")
    title = page.get_by_test_id("display-pattern").locator(".hl-title").inner_text()
    assert f", layer {layer}, head {head}: " in title  # the pattern shown is of that head

    zoom = page.get_by_test_id("pattern-zoom")
    px = int(zoom.get_attribute("data-px"))
    zoom.hover(position={"x": 10.5 * px, "y": 200.5 * px})
    assert "(exact)" in opened.tooltip()
    page.get_by_test_id("pattern-overview").click(position={"x": 250, "y": 250})
    assert zoom.get_attribute("data-q") != "0"

    canvas = page.get_by_test_id("circuit-canvas")
    assert canvas.get_attribute("data-picked") == f"{layer}.{head}"  # the head, lit
    count = page.get_by_test_id("circuit-count").inner_text()
    assert f"{layer}.{head} lit with " in count and "(the circuit)" in count
    canvas.click(position={"x": 5, "y": 5})  # no node there: the selection is cleared
    assert canvas.get_attribute("data-picked") == ""

    split = page.get_by_test_id("display-score-split")
    assert f"head {layer}.{head} " in split.locator(".hl-title").inner_text()  # the same head
    assert page.locator("[data-testid^=split-pick-]").count() == 3  # a pair a query
    other = (int(split.get_attribute("data-pair")) + 1) % 3
    page.locator("[data-testid^=split-pick-]").nth(other).click()
    assert split.get_attribute("data-pair") == str(other)
    pair = page.get_by_test_id("split-pair")
    cell, left, top = (int(pair.get_attribute(f"data-{k}")) for k in ("cell", "left", "top"))
    pair.hover(position={"x": left + 0.5 * cell, "y": top + 0.5 * cell})
    assert "query side" in opened.tooltip()
    opened.shot("notebook.png")
    opened.assert_clean()
    opened.close()


def test_the_default_export_draws_with_its_own_cdn_scripts_blocked(browser, executed, tmp_path):
    """nbconvert's default template loads MathJax and require.js from a CDN; blocked, they are
    the only requests and the only errors, and every display draws without them."""
    opened = Offline(browser, export(executed, tmp_path))
    assert len(opened.blocked) == 2 and all(u.startswith(NBCONVERT_CDN) for u in opened.blocked)
    assert opened.errors == ["Failed to load resource: net::ERR_FAILED"] * 2
    drawn = opened.page.eval_on_selector_all(
        ".hl-display", "ds => ds.map(d => !!d.dataset.hlDrawn)"
    )
    assert drawn == [True] * 4 and opened.page.locator(".hl-error").count() == 0
    opened.close()

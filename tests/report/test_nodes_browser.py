"""The node scores' display in headless chromium with the network blocked: drawn, no console
error, no request, the model's markup kept as text; hovering a cell names its node and score
(a head, a K/V group and an MLP column), clicking it marks the node's row in the table; and the
report shows it in the circuits section."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from display_browser import Offline, chromium
from display_samples import XSS
from node_samples import GROUPS, HEADS, node_scores

from headlab.report.displays import page_code, show

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as instance:
        yield instance


def _cell(opened: Offline, layer: int, column: int) -> tuple[float, float]:
    """The page coordinates of a grid cell's centre, from the canvas' own layout."""
    canvas = opened.page.get_by_test_id("nodes-grid")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    cell, left, top = (float(canvas.get_attribute(f"data-{k}")) for k in ("cell", "left", "top"))
    return box["x"] + 1 + left + (column + 0.5) * cell, box["y"] + 1 + top + (layer + 0.5) * cell


def test_the_grid_hovers_every_kind_of_node_offline(browser, tmp_path):
    page = tmp_path / "nodes.html"
    page.write_text(
        "<!doctype html><meta charset=utf-8><body>" + show(node_scores()).html() + page_code(),
        encoding="utf-8",
    )
    opened = Offline(browser, page)
    assert opened.page.eval_on_selector_all(
        ".hl-display", "ds => ds.map(d => [d.dataset.hlKind, !!d.dataset.hlDrawn])"
    ) == [["nodes", True]]
    assert opened.page.locator("img").count() == 0 and XSS in opened.page.inner_text("body")
    scores = dict(zip(node_scores().nodes, node_scores().scores, strict=True))
    cells = ((2, 5, "2.5"), (1, HEADS + 1, "1.g1"), (0, HEADS + GROUPS, "mlp.0"))
    for layer, column, name in cells:
        opened.page.mouse.move(*_cell(opened, layer, column))
        text = opened.tooltip()
        assert text.startswith(name) and f"score {float(f'{scores[name]:.4g}')!r}" in text
    opened.page.mouse.click(*_cell(opened, 1, HEADS + 1))
    picked = opened.page.locator("[data-testid=nodes-table] tr.picked")
    assert picked.count() == 0  # 1.g1 (-0.4) is not among the 20 strongest the table lists
    opened.page.mouse.click(*_cell(opened, 2, 5))
    assert picked.inner_text().split() == ["1", "2.5", float_text(scores["2.5"])]
    rows = opened.page.locator("[data-testid=nodes-table] tbody tr").all_inner_texts()
    assert [row.split()[1] for row in rows[:4]] == ["2.5", "mlp.0", "mlp.2", "2.4"]
    opened.shot("node_scores.png")
    opened.assert_clean()
    opened.close()


def float_text(value: float) -> str:
    """What the page prints for a score: 4 significant digits."""
    return repr(float(f"{value:.4g}"))


def test_the_report_shows_the_node_scores(browser, tmp_path):
    from report_pages import build

    from headlab.report import ReportRequest
    from headlab.results.json_store import write_result

    results = tmp_path / "results"
    results.mkdir()
    write_result(results / "circuit_nodes.json", node_scores())
    index = build(tmp_path / "report", ReportRequest(results=results, use_model=False))
    opened = Offline(browser, index)
    section = opened.page.locator("#circuits")
    assert section.get_by_test_id("nodes-grid").count() == 1
    assert section.locator("img").count() == 0 and XSS in section.inner_text()
    opened.assert_clean()
    opened.close()

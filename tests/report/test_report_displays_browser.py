"""The report with every results file that has a display, opened as a file in headless chromium
with the network blocked: each section shows the notebook's display of its result (heads with
their roles, roles, KV-budget plans, circuit, faithfulness curve, score split, node scores,
cross-attention, patch grid), drawn by the one copy of the drawers, with no second view beside
it, no console error and no request."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from display_browser import Offline, chromium
from display_samples import circuit_run, head_statistics, score_split_result
from kind_samples import encoder_decoder_heads, vision_heads
from long_results import write_long_results
from node_samples import node_scores
from report_pages import build

from headlab.report import ReportRequest
from headlab.results.json_store import write_result

pytestmark = pytest.mark.browser

#: page section -> the displays it shows, in order
SHOWN = {
    "model": ["heads"],
    "kinds": ["cross", "patch-grid"],
    "long-context": ["roles", "kv-budget"],
    "circuits": ["circuit", "faithfulness", "score-split", "nodes"],
}


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as instance:
        yield instance


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("every-display")
    results = write_long_results(root / "results")  # SmolLM2's size: 30 x 9 heads
    stats = dataclasses.replace(head_statistics(30, 9), model="SmolLM2-135M")
    write_result(results / "model_heads.json", stats)
    write_result(results / "circuits.json", circuit_run())
    write_result(results / "why_attends.json", score_split_result())
    write_result(results / "circuit_nodes.json", node_scores())
    write_result(results / "model_heads-encoder-decoder.json", encoder_decoder_heads())
    write_result(results / "model_heads-vision.json", vision_heads())
    return build(root / "report", ReportRequest(results=results, use_model=False))


def test_each_section_shows_its_display_offline(browser, report):
    html = report.read_text(encoding="utf-8")
    assert html.count('<script data-headlab-code="js">') == 1  # the drawers once
    opened = Offline(browser, report)
    page = opened.page
    for section, kinds in SHOWN.items():
        where = page.locator(f"section#{section}")
        shown = where.locator(".hl-display").evaluate_all(
            "ds => ds.map(d => [d.dataset.hlKind, !!d.dataset.hlDrawn])"
        )
        assert shown == [[kind, True] for kind in kinds], section
        assert where.locator("img").count() == 0, section  # no figure beside a display
        assert where.locator("table").count() == where.locator(".hl-display table").count()
    assert page.locator(".hl-fallback").count() == 0
    # the heads come with their roles on the long text (same model, same heads)
    page.get_by_test_id("heads-metric-role").click()
    assert "retrieval" in page.locator("section#model [data-testid=roles-legend]").inner_text()
    canvas = page.get_by_test_id("circuit-canvas")
    assert int(canvas.get_attribute("data-shown")) == 40  # the circuit, the top 40
    assert page.locator("[data-testid=circuit-edges] tbody tr").count() == 40
    opened.shot("report-every-display.png")
    opened.assert_clean()
    opened.close()

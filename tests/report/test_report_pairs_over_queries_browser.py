"""The report's "One head over all its queries" part in headless chromium with the network
blocked: its figure loads from the page itself, its table lists the strongest pairs, the text's
description and the model's name stay text (no element made from them), and nothing leaves the
page or errs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from display_browser import Offline, chromium
from report_pages import build
from test_report_pairs_over_queries import _result

from headlab.report import ReportRequest
from headlab.results.json_store import write_result

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"


def test_the_part_in_a_browser(tmp_path: Path):
    results = tmp_path / "results"
    results.mkdir()
    hostile = dataclasses.replace(_result(), model=f"m {XSS}", text=f"t {XSS}")
    write_result(results / "why_attends_all_queries.json", hostile)
    report = build(tmp_path / "report", ReportRequest(results=results, use_model=False))
    with chromium() as browser:
        opened = Offline(browser, report)
        page = opened.page
        part = page.locator("section#circuits")
        figure = part.get_by_test_id("figure-why-attends-all").locator("img")
        assert figure.evaluate("img => img.complete && img.naturalWidth > 0")
        assert part.get_by_test_id("why-attends-all-table").locator("tbody tr").count() == 3
        assert "q.k sums to 2.75" in part.get_by_test_id("answer-why-attends-all").inner_text()
        assert XSS in part.inner_text()  # shown as text
        assert part.locator("img").count() == 1  # the figure, not the model's name
        opened.shot("report-why-attends-all.png", "#why-attends-all ~ figure")
        opened.assert_clean()
        opened.close()

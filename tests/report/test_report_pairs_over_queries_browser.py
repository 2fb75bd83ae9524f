"""The report's "One head over all its queries" part in headless chromium with the network
blocked: its figure loads from the page itself, its table lists the strongest pairs, the text's
description and the model's name stay text (no element made from them), and nothing leaves the
page or errs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from display_browser import Offline, chromium
from report_pages import build
from test_report_pairs_over_queries import _result

from headlab.report import ReportRequest
from headlab.report.displays.show_display import show
from headlab.results.json_store import write_result
from headlab.results.pairs_over_queries_result import PairsOverQueriesResult

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


def _many_queries(n: int = 211) -> PairsOverQueriesResult:
    """``n`` queries of a hostile text, each at a key at or before it; marginals of 13 named
    components (sizes all different, so the bars' order is known)."""
    rng = np.random.default_rng(3)
    names = ["embed"] + [f"{layer}.{head}" for layer in range(2) for head in range(5)]
    names += ["mlp.0", "qk-bias"]
    keys = [int(rng.integers(0, q + 1)) for q in range(n)]
    raw = rng.standard_normal(n).round(4).tolist()
    total = sum(raw)
    key_side = rng.permutation(np.arange(1, len(names) + 1) * 0.1) - 0.3
    key_side[-1] += total - key_side.sum()
    query_side = np.zeros(len(names))
    query_side[0] = total
    return PairsOverQueriesResult(
        model=f"m {XSS}",
        layer=1,
        head=2,
        kv_group=0,
        text="t",
        tokens=[f"tok{q} {XSS}" for q in range(n)],
        components=names,
        scale=0.125,
        query_marginal=query_side.tolist(),
        key_marginal=key_side.tolist(),
        pair_rows=["embed", "rest"],
        pair_cols=[names[1], "rest"],
        pair=[[float(key_side[1]), total - float(key_side[1])], [0.0, 0.0]],
        strongest=[("embed", names[1], float(key_side[1]))],
        keys=keys,
        raw=raw,
    )


def test_the_notebook_display_of_every_query(tmp_path: Path):
    """``show(result)``: the summed matrix, the marginals' largest 10 in order, and a point per
    query whose tooltip names the query, its attended key and its raw score."""
    result = _many_queries()
    path = tmp_path / "pairs.html"
    path.write_text("<!doctype html><meta charset=utf-8><body>" + show(result).html(code=True))
    with chromium() as browser:
        opened = Offline(browser, path)
        page = opened.page
        bars = page.get_by_test_id("pairs-key-bars").locator(".hl-bar-row")
        order = np.argsort(-np.abs(result.key_marginal), kind="stable")[:10]
        assert [bars.nth(i).get_attribute("data-component") for i in range(10)] == [
            result.components[i] for i in order
        ]
        say = page.get_by_test_id("pairs-say").inner_text()
        assert f"{result.keys.count(0)} queries attend the first position" in say
        canvas = page.get_by_test_id("pairs-attended")
        query, n = 150, len(result.keys)
        x = 1 + 46 + query / (n - 1) * (430 - 46 - 8)  # inside the 1 px border: the drawing's x
        canvas.hover(position={"x": x, "y": 100})
        key = result.keys[query]
        assert opened.tooltip().startswith(f"query {query} ") and f"key {key} " in opened.tooltip()
        assert f"tok{key} <img src=x" in opened.tooltip()  # the text's tokens stay text
        assert page.locator("img").count() == 0
        opened.shot("display-pairs-over-queries.png", "[data-testid=display-pairs-over-queries]")
        opened.assert_clean()
        opened.close()

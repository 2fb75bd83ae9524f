"""The model explorer at one cell a token, 512 tokens, in headless chromium: a previous-token
head's diagonal one position off the main one and an induction head's stripe a repeat back are
drawn as single bright cells, hovering names the weight, and the page fetches nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from report_pages import collect_measured
from test_report_browser import Opened, browser  # noqa: F401 (the module's chromium fixture)

from headlab.report import ReportRequest, render
from headlab.results.attention_views import AttentionView
from headlab.results.explorers import TOKEN_CELLS, heatmap_data

pytestmark = pytest.mark.browser

N, REPEAT = 512, 255  # BOS + r + r..., the repeat r of 255 tokens


def striped_heads() -> np.ndarray:
    """(layer 2, head 3, 512, 512) causal rows: 0 previous-token (0.85 on q - 1), 1 induction
    (0.7 on q - 255 once the repeat starts), 2 uniform; layer 1 random causal."""
    causal = np.tri(N)
    uniform = causal / causal.sum(-1, keepdims=True)
    w = np.zeros((2, 3, N, N))
    rows = np.arange(1, N)
    w[0, 0] = uniform * 0.15
    w[0, 0, rows, rows - 1] += 0.85
    w[0, 0, 0, 0] = 1.0
    w[0, 1] = uniform
    late = np.arange(REPEAT + 1, N)
    w[0, 1, late] *= 0.3
    w[0, 1, late, late - REPEAT] += 0.7
    w[0, 2] = uniform
    scores = np.where(causal > 0, np.random.default_rng(3).normal(size=(3, N, N)) * 2, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    w[1] = e / e.sum(-1, keepdims=True)
    return w


def green(opened: Opened, q: int, k: int) -> int:
    """The green channel of the model heatmap's pixel at (query q, key k)."""
    return opened.canvas("model", 0).evaluate(
        """(c, [q, k]) => {
          const m = +c.dataset.margin, cell = +c.dataset.cell, r = c.width / +c.dataset.size;
          const x = Math.floor((m + (k + 0.5) * cell) * r);
          const y = Math.floor((m + (q + 0.5) * cell) * r);
          return c.getContext('2d').getImageData(x, y, 1, 1).data[1];
        }""",
        [q, k],
    )


def ready(opened: Opened) -> None:
    opened.page.wait_for_function(
        "() => document.querySelector('[data-testid=heatmap-model-0]').dataset.ready === '1'"
    )


def test_stripes_at_512_tokens_are_single_cells(
    browser: object,  # noqa: F811
    tmp_path: Path,
    shared_results: Path,
) -> None:
    weights = striped_heads()
    tokens = [f"t{i}" for i in range(N)]
    collected = collect_measured(ReportRequest(text="a b", results=shared_results, use_model=False))
    explorer = heatmap_data("model", tokens, [AttentionView("3 heads", weights)], token_level=True)
    assert explorer["cells"] == TOKEN_CELLS and explorer["triangle"] and explorer["bins"] == N
    collected.explorers["model"] = explorer
    collected.sections["has_model"] = True
    index = tmp_path / "index.html"
    index.write_text(render(collected), encoding="utf-8")
    opened = Opened(browser, index)
    page = opened.page
    ready(opened)
    assert page.get_by_test_id("heatmap-model-0").evaluate("c => +c.dataset.cell") == 1
    # previous-token: the cell one left of the diagonal is bright, its neighbours dark
    for q in (40, 300, 511):
        assert (
            green(opened, q, q - 1) > 200 > 60 > max(green(opened, q, q - 3), green(opened, q, q))
        )
    page.get_by_test_id("head-model-0-1").click()
    ready(opened)
    for q in (300, 420):
        assert green(opened, q, q - REPEAT) > 200 > 60 > green(opened, q, q - REPEAT + 2)
    tip = opened.hover_cell("model", 0, q=420, k=420 - REPEAT)
    assert "head 1" in tip and "query \u201ct420\u201d (420)" in tip
    scale = weights[0, 1].max()
    shown = float(tip.rsplit("weight ", 1)[1])
    assert shown == pytest.approx(weights[0, 1, 420, 420 - REPEAT], abs=scale / 510 + 1e-4)
    opened.shot("report-token-level.png")
    before = opened.picture("model", 0)
    page.get_by_test_id("layer-model-1").click()
    ready(opened)
    assert opened.picture("model", 0) != before
    opened.assert_clean()
    page.close()

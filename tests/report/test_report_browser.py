"""The report in a real browser: headless Debian chromium driven by Playwright.

A missing chromium FAILS these tests (CI installs it in .ci/run); they are never skipped.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from report_pages import build, collect_measured

from headlab.analysis.text_attention import seeded_text_attention
from headlab.report import DEFAULT_TEXT, ReportRequest, render
from headlab.results.attention_views import AttentionView
from headlab.results.explorers import heatmap_data

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
XSS = "<img src=x onerror=alert(1)>"
SCRIPT = "</script><script>alert(2)</script>"  # one word: it becomes a token


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(executable).exists():
        pytest.fail("chromium is not installed: apt-get install -y chromium (.ci/run does this)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=executable, args=ARGS)
        yield instance
        instance.close()


class Opened:
    """A page with what it logged: console errors, page errors, requests, dialogs."""

    def __init__(self, browser: object, index: Path) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.url = index.resolve().as_uri()
        self.page.goto(self.url)

    def canvas(self, explorer: str, view: int) -> object:
        return self.page.get_by_test_id(f"heatmap-{explorer}-{view}")

    def picture(self, explorer: str, view: int) -> str:
        return self.canvas(explorer, view).evaluate("c => c.toDataURL()")

    def hover_cell(self, explorer: str, view: int, q: int, k: int) -> str:
        canvas = self.canvas(explorer, view)
        geo = canvas.evaluate(
            "c => ({m: +c.dataset.margin, c: +c.dataset.cell, size: +c.dataset.size,"
            " w: c.getBoundingClientRect().width})"
        )
        zoom = geo["w"] / geo["size"]
        canvas.hover(
            position={
                "x": (geo["m"] + (k + 0.5) * geo["c"]) * zoom,
                "y": (geo["m"] + (q + 0.5) * geo["c"]) * zoom,
            }
        )
        tooltip = self.page.get_by_test_id("tooltip")
        tooltip.wait_for(state="visible")
        return tooltip.inner_text()

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)

    def assert_clean(self) -> None:
        assert self.errors == []
        assert self.requests == [self.url]  # the page itself; nothing from the network
        assert self.dialogs == []


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, shared_results: Path) -> Path:
    out = tmp_path_factory.mktemp("browser") / "report"
    return build(out, ReportRequest(results=shared_results))


def test_heads_switch_and_cells_name_their_tokens(browser: object, report: Path) -> None:
    opened = Opened(browser, report)
    page = opened.page
    before = opened.picture("text", 0)
    page.get_by_test_id("head-text-0-3").click()
    assert opened.picture("text", 0) != before
    assert "active" in page.get_by_test_id("head-text-0-3").get_attribute("class")
    largest = float(page.get_by_test_id("scale-text-0").inner_text().split("largest cell ")[1][:5])

    tokens = DEFAULT_TEXT.split()
    multi, single = seeded_text_attention(tokens).views
    assert largest == pytest.approx(multi.weights[0, 3].max(), abs=1e-3)
    text = opened.hover_cell("text", 0, q=2, k=5)
    assert f"query \u201c{tokens[2]}\u201d (2)" in text
    assert f"key \u201c{tokens[5]}\u201d (5)" in text
    shown = float(text.rsplit("weight ", 1)[1])
    assert shown == pytest.approx(multi.weights[0, 3, 2, 5], abs=2e-4)
    text = opened.hover_cell("text", 1, q=7, k=0)
    shown = float(text.rsplit("weight ", 1)[1])
    assert shown == pytest.approx(single.weights[0, 0, 7, 0], abs=2e-4)

    # every section is there: answers with verdicts, coupling, parameters, results figures
    for testid in ("scenario-2", "coupling-1", "param-table", "figure-heads", "figure-sweep"):
        assert page.get_by_test_id(testid).is_visible()
    assert np.isfinite(float(page.evaluate("document.body.dataset.renderMs")))
    opened.shot("report.png")
    page.locator("#attention").screenshot(path=str(ARTIFACTS / "report-attention.png"))
    opened.assert_clean()
    page.close()


def test_user_text_shows_as_text_and_runs_nothing(
    browser: object, tmp_path: Path, shared_results: Path
) -> None:
    text = f'{XSS} {SCRIPT} after "q\'uote" end'
    index = build(tmp_path / "r", ReportRequest(text=text, results=shared_results))
    opened = Opened(browser, index)
    page = opened.page
    assert page.get_by_test_id("input-text").inner_text() == text
    assert page.evaluate("document.querySelectorAll('img[src=x], img[onerror]').length") == 0
    tip = opened.hover_cell("text", 0, q=3, k=0)
    assert f"query \u201c{SCRIPT}\u201d (3)" in tip and "key \u201c<img\u201d (0)" in tip
    assert page.evaluate("document.querySelectorAll('#tooltip *').length") == 4  # our 4 lines
    opened.shot("report-escaping.png")
    opened.assert_clean()
    page.close()


def test_2048_tokens_open_and_switch_heads_fast(
    browser: object, tmp_path: Path, shared_results: Path
) -> None:
    text = " ".join(f"w{i % 97}" for i in range(2048))
    # MiniLM's 72 heads and 6 one-head views see 512 tokens, one cell a token within the page's
    # budget (no warning); the seeded layer's explorer bins the 2048 words to 256 x 256
    index = build(tmp_path / "r", ReportRequest(text=text, results=shared_results))
    opened = Opened(browser, index)
    page = opened.page
    assert float(page.evaluate("document.body.dataset.renderMs")) < 1000
    for head in (5, 1, 7):
        before = opened.picture("text", 0)
        elapsed = page.get_by_test_id(f"head-text-0-{head}").evaluate(
            "b => { const t = performance.now(); b.click(); return performance.now() - t; }"
        )
        assert elapsed < 1000, f"switching to head {head} took {elapsed:.0f} ms"
        assert opened.picture("text", 0) != before
    tip = opened.hover_cell("text", 0, q=200, k=3)  # not a corner: those are rounded
    assert "(1600\u20131607)" in tip and "(24\u201331)" in tip  # 256 bins of 8 tokens
    opened.shot("report-2048.png")
    opened.assert_clean()
    page.close()


def test_layer_selector_switches_every_panel(
    browser: object, tmp_path: Path, shared_results: Path
) -> None:
    """A multi-layer source (as the trained encoder gives): layer chips redraw the heatmap."""
    tokens = ["[CLS]", "heads", "<b>see</b>", "things", "[SEP]"]
    rng = np.random.default_rng(2)
    weights = rng.random((3, 4, 5, 5)) ** 4  # (layer, head, q_pos, k_pos), distinct sizes
    weights /= weights.sum(-1, keepdims=True)
    collected = collect_measured(ReportRequest(text="a b", results=shared_results))
    collected.explorers["model"] = heatmap_data(
        "model", tokens, [AttentionView("4 heads", weights)]
    )
    collected.sections["has_model"] = True
    index = tmp_path / "index.html"
    index.write_text(render(collected), encoding="utf-8")
    opened = Opened(browser, index)
    page = opened.page
    before = opened.picture("model", 0)
    page.get_by_test_id("layer-model-2").click()
    assert opened.picture("model", 0) != before
    page.get_by_test_id("head-model-0-3").click()
    tip = opened.hover_cell("model", 0, q=2, k=4)
    assert "layer 2, head 3" in tip and "query \u201c<b>see</b>\u201d (2)" in tip
    assert float(tip.rsplit("weight ", 1)[1]) == pytest.approx(weights[2, 3, 2, 4], abs=2e-4)
    opened.assert_clean()
    page.close()


def test_labels_at_every_length_and_a_cut_text_says_so(
    browser: object, tmp_path: Path, shared_results: Path
) -> None:
    """Past 40 tokens every n-th label is drawn, at least 14 px apart; hovering a label names
    its token; a text cut to a model's limit says "cut to N of M tokens"."""
    n = 120
    tokens = [f"tok{i}" for i in range(n)]
    weights = np.full((2, 3, n, n), 1.0 / n)
    collected = collect_measured(ReportRequest(text="a b", results=shared_results))
    collected.explorers["model"] = heatmap_data(
        "model", tokens, [AttentionView("3 heads", weights)], total_tokens=700
    )
    collected.sections["has_model"] = True
    index = tmp_path / "index.html"
    index.write_text(render(collected), encoding="utf-8")
    opened = Opened(browser, index)
    page = opened.page
    assert page.get_by_test_id("cut-model").inner_text().startswith("Cut to 120 of 700 tokens")
    assert page.locator("[data-testid=cut-text]").count() == 0
    canvas = opened.canvas("model", 0)
    geo = canvas.evaluate("c => [+c.dataset.step, +c.dataset.cell, +c.dataset.labels]")
    step, cell, labels = geo
    assert step > 1 and step * cell >= 14 and labels == -(-n // step)
    # the text explorer's two words are both labelled
    text_canvas = opened.canvas("text", 0)
    assert text_canvas.evaluate("c => [+c.dataset.step, +c.dataset.labels]") == [1, 2]
    zoom = canvas.evaluate("c => c.getBoundingClientRect().width / +c.dataset.size")
    margin = canvas.evaluate("c => +c.dataset.margin")
    canvas.hover(position={"x": (margin - 20) * zoom, "y": (margin + (step + 0.5) * cell) * zoom})
    assert page.get_by_test_id("tooltip").inner_text() == f"query \u201ctok{step}\u201d ({step})"
    opened.shot("report-labels.png")
    opened.assert_clean()
    page.close()


def test_a_head_picked_in_the_heads_display_opens_on_the_text(
    browser: object, tmp_path: Path, shared_results: Path
) -> None:
    """Clicking layer 2, head 4 of the heads display selects it in its table and, since the
    encoder explorer has the same 3 x 5 heads, offers that head there, which opens it."""
    rng = np.random.default_rng(4)
    weights = rng.random((3, 5, 4, 4)) ** 4  # (layer, head, q_pos, k_pos) as model_heads: 3 x 5
    weights /= weights.sum(-1, keepdims=True)
    collected = collect_measured(ReportRequest(text="a b", results=shared_results))
    collected.explorers["model"] = heatmap_data(
        "model", ["a", "b", "c", "d"], [AttentionView("5 heads", weights)]
    )
    collected.sections["has_model"] = True
    index = tmp_path / "index.html"
    index.write_text(render(collected), encoding="utf-8")
    opened = Opened(browser, index)
    page = opened.page
    view = page.get_by_test_id("head-view")
    assert not view.is_visible()
    canvas = page.get_by_test_id("heads-heatmap")
    cell, left, top = (int(canvas.get_attribute(f"data-{k}")) for k in ("cell", "left", "top"))
    canvas.click(position={"x": left + 4.5 * cell, "y": top + 2.5 * cell})  # layer 2, head 4
    picked = page.locator("[data-testid=heads-table] tr.picked")
    assert (picked.get_attribute("data-layer"), picked.get_attribute("data-head")) == ("2", "4")
    assert view.is_visible()
    before = opened.picture("model", 0)
    view.get_by_text("show layer 2, head 4 on your text").click()
    assert opened.picture("model", 0) != before
    assert "active" in page.get_by_test_id("layer-model-2").get_attribute("class")
    assert "active" in page.get_by_test_id("head-model-0-4").get_attribute("class")
    page.locator("#model").screenshot(path=str(ARTIFACTS / "report-heads.png"))
    opened.assert_clean()
    page.close()


def test_long_context_at_8192_tokens_and_270_heads(browser: object, tmp_path: Path) -> None:
    """SmolLM2's size, through the notebook's displays: every head's role, and for the head
    picked its blocked map and the attention each key receives; the KV-budget table and plans."""
    from long_results import write_long_results

    results = write_long_results(tmp_path / "results")
    index = build(tmp_path / "r", ReportRequest(results=results, use_model=False))
    opened = Opened(browser, index)
    page = opened.page
    section = page.locator("#long-context")
    assert section.locator("img").count() == 0  # the displays, no second view beside them
    assert page.get_by_test_id("kv-budget-table").locator("tbody tr").count() == 4
    for name in ("display-roles", "display-kv-budget"):
        assert page.get_by_test_id(name).get_attribute("data-hl-drawn") == "1", name
    grid = page.get_by_test_id("roles-grid")
    cell, left, top = (int(grid.get_attribute(f"data-{k}")) for k in ("cell", "left", "top"))
    before = page.get_by_test_id("roles-map").evaluate("c => c.toDataURL()")
    grid.click(position={"x": left + 4.5 * cell, "y": top + 21.5 * cell})  # layer 21, head 4
    assert (
        page.get_by_test_id("roles-detail").locator("b").inner_text().startswith("layer 21, head 4")
    )
    assert page.get_by_test_id("roles-map").evaluate("c => c.toDataURL()") != before
    assert page.get_by_test_id("roles-profile").is_visible()
    page.get_by_test_id("roles-map").hover(position={"x": 3 * 4 + 1, "y": 40 * 4 + 1})
    tip = page.locator(".hl-tooltip").inner_text()
    assert "queries 5120\u20135247" in tip and "keys 384\u2013511" in tip
    ARTIFACTS.mkdir(exist_ok=True)
    section.screenshot(path=str(ARTIFACTS / "report-long-context.png"))
    opened.assert_clean()
    page.close()

"""The cross-attention and patch-grid displays in headless chromium with the network blocked:
drawn, no console error, no request, markup in tokens and names kept as text; a cross head's
hover names the target token, the source position and the exact weight; the patch grid
outlines the high-norm patch and its hover names the patch and its weight from the class
token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from display_browser import Offline, chromium
from display_samples import XSS
from kind_samples import (
    COLS,
    HIGH,
    REGISTERS,
    alignment,
    cls_rows,
    encoder_decoder_heads,
    vision_heads,
)

from headlab.report.displays import page_code, show

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as instance:
        yield instance


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parts = [show(encoder_decoder_heads()).html(), show(vision_heads()).html()]
    path = tmp_path_factory.mktemp("kinds") / "kinds.html"
    path.write_text(
        "<!doctype html><meta charset=utf-8><body>" + "".join(parts) + page_code(), encoding="utf-8"
    )
    return path


def _hover(opened: Offline, testid: str, x: float, y: float) -> str:
    canvas = opened.page.get_by_test_id(testid)
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    opened.page.mouse.move(box["x"] + x, box["y"] + y)
    return opened.tooltip()


def test_both_views_draw_offline_with_markup_as_text(browser, page_file):
    opened = Offline(browser, page_file)
    kinds = opened.page.eval_on_selector_all(
        ".hl-display", "ds => ds.map(d => [d.dataset.hlKind, !!d.dataset.hlDrawn])"
    )
    assert kinds == [["cross", True], ["patch-grid", True]]
    assert opened.page.locator("img").count() == 0  # the token <img ...> stayed text
    assert XSS in opened.page.get_by_test_id("cross-peaks").inner_text()
    opened.shot("kinds_displays.png")
    opened.assert_clean()
    opened.close()


def test_a_cross_head_hovers_tokens_sources_and_exact_weights(browser, page_file):
    opened = Offline(browser, page_file)
    canvas = opened.page.get_by_test_id("cross-pattern-canvas")
    box = canvas.bounding_box()
    cw, ch = (box["width"] - 2) / 53, (box["height"] - 2) / 11
    text = _hover(opened, "cross-pattern-canvas", 1 + cw * 5.5, 1 + ch * 1.5)  # target 1, pos 5
    want = alignment()[1, 5]
    assert f"target 1: {XSS}" in text and "source 5: 0.10s" in text
    assert f"weight {float(f'{want:.4g}')!r}" in text  # what the page prints: 4 digits
    peaks = opened.page.get_by_test_id("cross-peaks").inner_text()
    assert "tok0 \u2192 0.20s" in peaks  # token 2 peaks on position 10
    for testid, value in (("cross-from", 10), ("cross-to", 20)):  # narrow the source columns
        opened.page.get_by_test_id(testid).evaluate(
            f"e => {{ e.value = {value}; e.dispatchEvent(new Event('input')); }}"
        )
    shown = opened.page.get_by_test_id("cross-range").inner_text()
    assert shown == "source columns 10 (0.20s) to 20 (0.40s), 11 of 53"
    box = opened.page.get_by_test_id("cross-pattern-canvas").bounding_box()
    cw, ch = (box["width"] - 2) / 11, (box["height"] - 2) / 11
    text = _hover(opened, "cross-pattern-canvas", 1 + cw * 0.5, 1 + ch * 2.5)  # target 2, pos 10
    assert "target 2: tok0" in text and "source 10: 0.20s" in text
    assert f"weight {float(f'{alignment()[2, 10]:.4g}')!r}" in text
    opened.page.get_by_test_id("cross-kind-encoder").click()
    assert opened.page.get_by_test_id("cross-metric-self").count() == 1
    opened.assert_clean()
    opened.close()


def test_the_patch_grid_outlines_the_high_norm_patch_and_hovers_it(browser, page_file):
    opened = Offline(browser, page_file)
    others = opened.page.get_by_test_id("patch-grid-others").inner_text()
    assert "register 1" in others
    assert "1 high-norm patch" in opened.page.get_by_test_id("patch-grid").inner_text()
    cell = (opened.page.get_by_test_id("patch-grid-canvas").bounding_box()["width"] - 2) / COLS
    x, y = 1 + cell * (HIGH[1] + 0.5), 1 + cell * (HIGH[0] + 0.5)
    text = _hover(opened, "patch-grid-canvas", x, y)
    token = 1 + REGISTERS + HIGH[0] * COLS + HIGH[1]
    weight = cls_rows(3, 4)[2, 0, token]
    assert f"patch ({HIGH[0]}, {HIGH[1]}), token {token}" in text
    assert f"class token {float(f'{weight:.4g}')!r}" in text and "(high-norm)" in text
    opened.assert_clean()
    opened.close()


def test_the_report_shows_both_views_offline(browser, tmp_path):
    from report_pages import build

    from headlab.report import ReportRequest
    from headlab.results.json_store import write_result

    results = tmp_path / "results"
    results.mkdir()
    write_result(results / "model_heads-encoder-decoder.json", encoder_decoder_heads())
    write_result(results / "model_heads-vision.json", vision_heads())
    index = build(tmp_path / "report", ReportRequest(results=results, use_model=False))
    opened = Offline(browser, index)
    section = opened.page.locator("#kinds")
    assert section.get_by_test_id("cross-pattern-canvas").count() == 1
    assert section.get_by_test_id("patch-grid-canvas").count() == 1
    assert section.locator("img").count() == 0 and XSS in section.inner_text()
    opened.shot("report_kinds.png", "#kinds")
    opened.assert_clean()
    opened.close()

"""The score split's display (``headlab why-attends``) in headless chromium with the network
blocked: the pair matrix hovers its terms, the bars are each side's largest terms, the source
split lies on the text's tokens, an image's on its patch grid, and a cross-attention's on the
source's tokens with the encoder's components on its key side."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from display_browser import Offline, chromium
from display_samples import image_split_result, score_split_result

from headlab.report.displays import show

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as instance:
        yield instance


def test_the_score_split_shows_its_pairs_bars_and_sources(browser, tmp_path):
    """The pair matrix hovers its terms, the bars are the largest |terms| of each side, the
    source tokens carry what the head read at each, and another pair can be picked."""
    result = score_split_result()
    path = tmp_path / "split.html"
    path.write_text(
        "<!doctype html><meta charset=utf-8><body>" + show(result).html(code=True), encoding="utf-8"
    )
    opened = Offline(browser, path)
    page, root = opened.page, opened.page.get_by_test_id("display-score-split")
    first = max(range(3), key=lambda i: result.pairs[i].score)
    pair = result.pairs[first]
    assert root.get_attribute("data-pair") == str(first)
    canvas = page.get_by_test_id("split-pair")
    cell, left, top = (int(canvas.get_attribute(f"data-{k}")) for k in ("cell", "left", "top"))
    canvas.hover(position={"x": left + 0.5 * cell, "y": top + 2.5 * cell})
    text = opened.tooltip()
    assert f"query side {pair.pair_rows[2]} \u00d7 key side {pair.pair_cols[0]}" in text
    assert f"{pair.pair[2][0]:+.4g}".lstrip("+") in text
    names = page.locator("[data-testid=split-key-bars] .hl-bar-row").evaluate_all(
        "rows => rows.map(r => r.dataset.component)"
    )
    strongest = sorted(range(len(result.components)), key=lambda c: -abs(pair.key_marginal[c]))
    assert names == [result.components[c] for c in strongest[:10]]
    spans = page.locator("[data-testid=split-text] .hl-tok")
    source = pair.sources[0]
    end = min(len(result.tokens[0]), max(pair.key, pair.query) + 1, pair.key + 13)
    assert spans.count() == end - max(0, pair.key - 150)  # the text around the key
    at = spans.nth(3)
    position = int(at.get_attribute("data-pos"))
    at.hover()
    value = source.values[source.positions.index(position)]
    text = opened.tooltip()
    assert f"position {position} " in text and f"{abs(value):.3g}"[:4] in text
    assert page.locator("[data-testid=split-text] .hl-tok", has_text="<img").count() == 1
    page.locator("[data-testid^=split-pick-]").nth((first + 1) % 3).click()
    assert root.get_attribute("data-pair") == str((first + 1) % 3)
    opened.shot("display-score-split.png", "[data-testid=display-score-split]")
    opened.assert_clean()
    opened.close()


def test_an_image_split_shows_its_source_on_the_patch_grid(browser, tmp_path):
    """An image's split draws the strongest head's source split on the patch grid: a cell per
    patch (hover: its position and the exact term), the class token and registers below."""
    result = image_split_result()
    path = tmp_path / "image-split.html"
    path.write_text(
        "<!doctype html><meta charset=utf-8><body>" + show(result).html(code=True), encoding="utf-8"
    )
    opened = Offline(browser, path)
    page = opened.page
    canvas = page.get_by_test_id("split-grid")
    cell = int(canvas.get_attribute("data-cell"))
    assert canvas.bounding_box()["width"] >= 4 * cell  # 4 columns
    canvas.hover(position={"x": 1 + 2.5 * cell, "y": 1 + 1.5 * cell})  # patch (1, 2)
    source = result.pairs[0].sources[0]
    position = 5 + 1 * 4 + 2
    text = opened.tooltip()
    assert f"position {position} " in text and "patch 1,2" in text
    assert f"{abs(source.values[position]):.4g}" in text
    others = page.get_by_test_id("split-grid-others").inner_text()
    assert others.startswith("cls ") and "register 3" in others
    assert page.locator("[data-testid=split-text] .hl-tok").count() == 0  # no row of tokens
    opened.shot("display-score-split-image.png", "[data-testid=display-score-split]")
    opened.assert_clean()
    opened.close()


def test_a_cross_attention_split_shows_the_key_sides_own_names(browser, tmp_path):
    """A cross-attention's key side is the encoder's: its bars name the encoder's components,
    its pair names the source's label, not the target's token at that position, and an encoder
    head's split by source lies on the source's tokens, the query (a target position) not
    outlined among them."""
    from dataclasses import replace

    plain = score_split_result()
    keyed = ["enc." + c for c in plain.components]
    labels = [f"src{i}" for i in range(64)]
    pairs = [
        replace(p, sources=[replace(s, component="enc." + s.component) for s in p.sources])
        for p in plain.pairs
    ]
    result = replace(plain, pairs=pairs, attention="cross", key_components=keyed, key_tokens=labels)
    path = tmp_path / "cross.html"
    path.write_text(
        "<!doctype html><meta charset=utf-8><body>" + show(result).html(code=True), encoding="utf-8"
    )
    opened = Offline(browser, path)
    page = opened.page
    first = max(range(3), key=lambda i: result.pairs[i].score)
    pair = result.pairs[first]
    names = page.locator("[data-testid=split-key-bars] .hl-bar-row").evaluate_all(
        "rows => rows.map(r => r.dataset.component)"
    )
    strongest = sorted(range(len(keyed)), key=lambda c: -abs(pair.key_marginal[c]))
    assert names == [keyed[c] for c in strongest[:10]]
    said = page.get_by_test_id("split-say").inner_text()
    assert f"src{pair.key}" in said  # the source's label of the key position
    spans = page.locator("[data-testid=split-text] .hl-tok")
    assert spans.count() == min(64, pair.key + 13) - max(0, pair.key - 150)
    shown = spans.evaluate_all("spans => spans.map(s => s.textContent)")
    assert shown[0] == f"src{max(0, pair.key - 150)}"
    assert page.locator("[data-testid=split-text] .hl-asker").count() == 0
    caption = page.get_by_test_id("split-sources").inner_text()
    assert f"head {pair.sources[0].component} at key {pair.key}" in caption
    opened.assert_clean()
    opened.close()

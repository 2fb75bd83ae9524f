"""Every display in headless chromium with the network blocked: drawn, no console error, no
request; hover names tokens and exact weights (against the synthetic weights themselves),
sorting, selection, moving the zoom and the circuit's threshold work. How each notebook front end
runs a display's scripts: test_front_ends_browser.py."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from display_browser import Offline, chromium
from display_samples import (
    circuit_run,
    head_pattern,
    head_statistics,
    image_split_result,
    synthetic_weights,
)
from long_results import kv_budget_result, long_context_result

from headlab.report.displays import page_code, show
from headlab.report.displays.circuit_display import faithfulness_display
from headlab.results.head_pattern_result import ENTRY_BYTES, TILE_OVERHEAD

pytestmark = pytest.mark.browser
#: Two animation frames: a redraw asked on input has run.
FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
N = 300  # tokens of the pattern: two tiles a side, the second ragged


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as instance:
        yield instance


@pytest.fixture(scope="module")
def displays() -> dict:
    run = circuit_run()
    return {
        "heads": show(head_statistics()),
        "pattern": show(head_pattern(N)),
        "roles": show(long_context_result()),
        "kv": show(kv_budget_result()),
        "circuit": show(run),
        "curve": faithfulness_display([run.faithfulness], "curve"),
        "run": run,
    }


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory, displays: dict) -> Path:
    parts = [d.html() for name, d in displays.items() if name != "run"]
    path = tmp_path_factory.mktemp("displays") / "displays.html"
    # the code once, after the displays (as the report has it)
    path.write_text(
        "<!doctype html><meta charset=utf-8><body>" + "".join(parts) + page_code(), encoding="utf-8"
    )
    return path


def test_every_display_draws_offline(browser, page_file):
    opened = Offline(browser, page_file)
    kinds = opened.page.eval_on_selector_all(
        ".hl-display", "ds => ds.map(d => [d.dataset.hlKind, !!d.dataset.hlDrawn])"
    )
    assert kinds == [
        [k, True] for k in ("heads", "pattern", "roles", "kv-budget", "circuit", "faithfulness")
    ]
    assert opened.page.locator(".hl-fallback").count() == 0
    opened.shot("displays.png")
    opened.assert_clean()
    opened.close()


def test_heads_sort_and_select(browser, page_file, displays):
    opened = Offline(browser, page_file)
    page, stats = opened.page, displays["heads"].data
    page.get_by_test_id("heads-sort-prev").click()
    first = page.locator("[data-testid=heads-table] tbody tr").first
    prev = np.array(stats["metrics"]["prev"])
    assert (
        int(first.get_attribute("data-layer")),
        int(first.get_attribute("data-head")),
    ) == np.unravel_index(prev.argmax(), prev.shape)
    canvas = page.get_by_test_id("heads-heatmap")
    cell, left, top = (int(canvas.get_attribute(f"data-{k}")) for k in ("cell", "left", "top"))
    canvas.hover(position={"x": left + 3.5 * cell, "y": top + 2.5 * cell})  # layer 2, head 3
    assert f"prev {prev[2, 3]:.4g}"[:9] in opened.tooltip()
    page.evaluate(
        "window.picks = []; document.addEventListener('headlab-pick', e => picks.push(e.detail))"
    )
    canvas.click(position={"x": left + 3.5 * cell, "y": top + 2.5 * cell})
    picked = page.locator("[data-testid=heads-table] tr.picked")
    assert (picked.get_attribute("data-layer"), picked.get_attribute("data-head")) == ("2", "3")
    assert page.evaluate("picks") == [{"layer": 2, "head": 3}]  # the page hears the pick
    # a detector is drawn on 0..1 whatever its range; a statistic on its own
    page.get_by_test_id("heads-metric-induction").click()
    legend = page.locator("[data-testid=display-heads] .hl-legend").inner_text()
    assert legend.startswith("0\n") and "\n1\n" in legend and "detector score" in legend
    page.get_by_test_id("heads-metric-prev").click()
    legend = page.locator("[data-testid=display-heads] .hl-legend").inner_text()
    assert "its own scale" in legend and "detector" not in legend
    opened.assert_clean()
    opened.close()


def test_heads_with_roles_colour_and_sort_by_role(browser, tmp_path):
    stats = head_statistics(30, 9, seed=2)
    roles = long_context_result().roles.roles  # 30 x 9
    path = tmp_path / "roles.html"
    path.write_text(show(stats, roles=roles, metric="entropy").html(code=True), encoding="utf-8")
    opened = Offline(browser, path)
    page = opened.page
    page.get_by_test_id("heads-metric-role").click()
    counts = {r: sum(row.count(r) for row in roles) for r in {r for row in roles for r in row}}
    legend = page.get_by_test_id("roles-legend").inner_text()
    for role, count in counts.items():
        assert f"{role} {count}" in legend
    first = page.locator("[data-testid=heads-table] tbody tr").first
    layer, head = int(first.get_attribute("data-layer")), int(first.get_attribute("data-head"))
    assert roles[layer][head] == min(counts)  # sorted by role, a to z
    opened.shot("display-heads-roles.png", "[data-testid=display-heads]")
    opened.assert_clean()
    opened.close()


def test_the_pattern_hovers_exact_weights_and_moves(browser, page_file, displays):
    opened = Offline(browser, page_file)
    page, data = opened.page, displays["pattern"].data
    weights = synthetic_weights(N)
    zoom = page.get_by_test_id("pattern-zoom")
    q0, k0, px = (int(zoom.get_attribute(f"data-{k}")) for k in ("q", "k", "px"))
    for i, j in ((10, 3), (200, 199), (255, 0)):
        zoom.hover(position={"x": (j + 0.5) * px, "y": (i + 0.5) * px})
        text = opened.tooltip()
        q, k = q0 + i, k0 + j
        assert f"query {q} " in text and f"key {k} " in text and "(exact)" in text
        assert float(text.split("weight ")[1].split(" ")[0]) == pytest.approx(
            weights[q, k], rel=1e-3
        )
        assert page.get_by_test_id("pattern-query").inner_text().startswith(f"query {q} ")
        spans = page.locator("[data-testid=pattern-text] .hl-tok")
        assert spans.count() == 256 and spans.nth(j).inner_text() == data["tokens"][k]
        if q - k0 < 256:  # the query is among the keys in view: it is marked
            assert spans.nth(q - k0).get_attribute("class") == "hl-tok hl-query"
    before = (zoom.get_attribute("data-q"), zoom.get_attribute("data-k"))
    page.get_by_test_id("pattern-overview").click(position={"x": 5, "y": 5})
    assert (zoom.get_attribute("data-q"), zoom.get_attribute("data-k")) == ("0", "0") != before
    page.get_by_test_id("pattern-move-1").click()  # keys ->
    assert int(zoom.get_attribute("data-k")) == N - 256  # moved, and kept inside the text
    opened.shot("display-pattern.png", "[data-testid=display-pattern]")
    opened.assert_clean()
    opened.close()


STRONG_PIXELS = """(id) => {
  const c = document.querySelector(`[data-testid=${id}]`);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) if (Math.min(d[i], d[i + 1], d[i + 2]) < 150) n++;
  return n / (d.length / 4);
}"""  # the share of a canvas' pixels in a strong colour (no channel above 150 of 255)


def test_the_circuit_threshold_and_node_selection(browser, page_file, displays):
    opened = Offline(browser, page_file)
    page, run = opened.page, displays["run"]
    canvas = page.get_by_test_id("circuit-canvas")
    assert int(canvas.get_attribute("data-shown")) == run.top  # the circuit first
    scores = np.frombuffer(base64.b64decode(displays["circuit"].data["scores"]), "<f4")
    scores = np.abs(scores.astype(np.float64))  # compared as the page does, in float64
    slider = page.get_by_test_id("circuit-threshold")
    for value in ("0", "350", "1000"):
        slider.fill(value)
        page.evaluate(FRAMES)
        threshold = float(canvas.get_attribute("data-threshold"))
        assert int(canvas.get_attribute("data-shown")) == (scores >= threshold).sum()
    assert int(canvas.get_attribute("data-shown")) >= 1
    slider.fill("0")
    page.evaluate(FRAMES)
    assert canvas.get_attribute("data-shown") == "70651"  # every edge, drawn
    # ... by opacity, weak edges near clear: not a solid block of hairlines (61% of the canvas
    # in strong colour when every hairline was at least a quarter opaque, on these scores and on
    # a real EAP run's; 24% and 1% drawn by opacity)
    assert page.evaluate(STRONG_PIXELS, "circuit-canvas") < 0.4
    data = displays["circuit"].data
    node = data["nodes"].index("16.0")
    x, y = _node_xy(data, node)  # CSS pixels inside the canvas' border (playwright's positions)
    canvas.hover(position={"x": x, "y": y})
    assert opened.tooltip().startswith("16.0")
    canvas.click(position={"x": x, "y": y})
    assert canvas.get_attribute("data-picked") == "16.0"
    assert "16.0 lit with 371 of its edges" in page.get_by_test_id("circuit-count").inner_text()
    rows = page.locator("[data-testid=circuit-edges] tbody tr").all_inner_texts()
    assert len(rows) == 40 and all("16.0" in row.split("\t")[1:3] for row in rows)
    canvas.click(position={"x": x, "y": y})  # unlit: the strongest edges drawn
    rows = page.locator("[data-testid=circuit-edges] tbody tr").all_inner_texts()
    signed = np.frombuffer(base64.b64decode(data["scores"]), "<f4")
    senders = np.frombuffer(base64.b64decode(data["senders"]), "<u2")
    for rank, row in enumerate(rows):
        number, sender, _, _, score = row.split("\t")
        assert int(number) == rank + 1 and sender == data["nodes"][senders[rank]]
        assert float(score) == pytest.approx(float(signed[rank]), rel=6e-3)  # 3 digits at least
    opened.shot("display-circuit.png", "[data-testid=display-circuit]")
    opened.assert_clean()
    opened.close()


def _size(data: dict) -> tuple[float, float]:
    (x0, x1), (y0, y1) = data["xlim"], data["ylim"]
    return (
        min(1100, max(640, 70 + 34 * (x1 - x0 - 0.2))),
        min(620, max(260, 60 + 22 * (y1 - y0 + 0.6))),
    )


def _node_xy(data: dict, i: int) -> tuple[float, float]:
    """Where the page draws node i (the drawer's own mapping of the frame, circuit.js)."""
    (w, h), (x0, x1), (y0, y1) = _size(data), data["xlim"], data["ylim"]
    x = 30 + ((data["x"][i] - x0) / (x1 - x0)) * (w - 50)
    y = 20 + (1 - (data["y"][i] - y0) / (y1 - y0)) * (h - 40)
    return x, y


def test_an_encoder_decoders_circuit_draws_both_streams(browser, tmp_path):
    """Its cross-attention heads and the decoder's nodes are on the canvas: pointing at a
    cross-attention head shows its name."""
    from test_stream_circuit_figure import _run

    display = show(_run())
    path = tmp_path / "stream.html"
    path.write_text(
        "<!doctype html><meta charset=utf-8><body>" + display.html() + page_code(),
        encoding="utf-8",
    )
    opened = Offline(browser, path)
    canvas = opened.page.get_by_test_id("circuit-canvas")
    for name in ("4.x4", "logits", "embed.encoder"):
        x, y = _node_xy(display.data, display.data["nodes"].index(name))
        canvas.hover(position={"x": x, "y": y})
        assert opened.tooltip().startswith(name)
    opened.shot("circuit-encoder-decoder.png", "[data-testid=circuit-canvas]")
    opened.assert_clean()
    opened.close()


def test_roles_plans_and_curves_respond(browser, page_file, displays):
    opened = Offline(browser, page_file)
    page = opened.page
    grid = page.get_by_test_id("roles-grid")
    cell, left, top = (int(grid.get_attribute(f"data-{k}")) for k in ("cell", "left", "top"))
    grid.click(position={"x": left + 2.5 * cell, "y": top + 14.5 * cell})  # layer 14, head 2
    role = displays["roles"].data["roles"][14][2]
    assert (
        page.get_by_test_id("roles-detail").locator("b").inner_text() == f"layer 14, head 2: {role}"
    )
    page.get_by_test_id("roles-map").hover(position={"x": 10, "y": 10})
    assert "mean weight on these keys" in opened.tooltip()
    sizes = page.locator("[data-testid=kv-budget-table] tbody tr").all_inner_texts()
    assert [row.split("\t")[0] for row in sizes] == [
        r["groups"] for r in displays["kv"].data["plan_sizes"]
    ]
    page.get_by_test_id("kv-run-2").click()
    assert "picked" in page.get_by_test_id("kv-run-2").get_attribute("class")
    page.get_by_test_id("faithfulness-canvas").hover(position={"x": 100, "y": 100})
    assert "edges" in opened.tooltip()
    opened.shot("display-roles.png", "[data-testid=display-roles]")
    opened.shot("display-kv-budget.png", "[data-testid=display-kv-budget]")
    opened.assert_clean()
    opened.close()


def test_the_pattern_below_its_floor_says_so(browser, tmp_path):
    """Within a small budget: a weight at or above the floor hovers exact, one below it is
    called what it is (below the floor), and the grey is drawn for it."""
    pattern = head_pattern(N, budget=TILE_OVERHEAD * 4 + ENTRY_BYTES * 4000)
    assert pattern.floor > 0
    path = tmp_path / "floor.html"
    path.write_text(
        "<!doctype html><meta charset=utf-8><body>" + show(pattern).html(code=True),
        encoding="utf-8",
    )
    opened = Offline(browser, path)
    weights = synthetic_weights(N)
    zoom = opened.page.get_by_test_id("pattern-zoom")
    q0, k0, px = (int(zoom.get_attribute(f"data-{k}")) for k in ("q", "k", "px"))
    view = weights[q0 : q0 + 256, k0 : k0 + 256]
    below = np.argwhere((view < pattern.floor) & (view > 0))[0]
    above = np.argwhere(view >= pattern.floor)[-1]
    for (i, j), exact in ((above, True), (below, False)):
        zoom.hover(position={"x": (j + 0.5) * px, "y": (i + 0.5) * px})
        text = opened.tooltip()
        if exact:
            shown = float(text.split("weight ")[1].split(" ")[0])
            assert shown == pytest.approx(view[i, j], rel=1e-3)
        else:
            assert f"below {pattern.floor:.3g}"[:10] in text and "(exact)" not in text
    info = opened.page.get_by_test_id("pattern-info").inner_text()
    assert "every weight \u2265" in info and f"{pattern.kept:,} weights" in info
    opened.shot("display-pattern-floor.png", "[data-testid=display-pattern]")
    opened.assert_clean()
    opened.close()


def test_a_large_patch_grid_shows_whole(browser, tmp_path):
    """DINOv2's 16 x 16 patches: the grid is drawn whole, not scrolled inside the text's strip
    of tokens (160 px high)."""
    path = tmp_path / "image-split-large.html"
    page_html = show(image_split_result(rows=13, cols=11)).html(code=True)
    path.write_text("<!doctype html><meta charset=utf-8><body>" + page_html, encoding="utf-8")
    opened = Offline(browser, path)
    canvas = opened.page.get_by_test_id("split-grid")
    box, holder = canvas.bounding_box(), opened.page.get_by_test_id("split-text").bounding_box()
    assert box["height"] > 160  # a grid taller than the strip
    assert holder["height"] >= box["height"] and holder["y"] <= box["y"]
    opened.assert_clean()
    opened.close()


def test_a_page_that_runs_no_script_shows_each_summary(browser, page_file, displays):
    """An untrusted notebook (JupyterLab and classic Notebook strip its scripts) or a viewer
    without scripts: each display shows its one-line summary, escaped, and nothing else."""
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(page_file.resolve().as_uri())
    fallbacks = page.locator(".hl-fallback")
    assert fallbacks.count() == len(displays) - 1  # every display but the run it came from
    assert fallbacks.first.inner_text().startswith(repr(head_statistics()))
    assert page.locator("canvas").count() == 0 and page.locator("img").count() == 0
    context.close()

"""The report's "Heads in a trained model" section with a decoder's head detectors (induction,
previous-token, duplicate-token) and, where a long-context run measured them, each head's role:
layer x head grids whose cells hold the values of the results files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from long_results import HEADS, LAYERS, long_context_result, write_long_results
from report_pages import collect_measured

from headlab.report import ReportRequest, render
from headlab.report.long_context_figures import ROLE_COLOURS
from headlab.results.json_store import write_result

MODEL = "SmolLM2-135M"


def _heads(seed: int, model: str = MODEL) -> dict:
    rng = np.random.default_rng(seed)
    shape = (LAYERS, HEADS)  # 30 x 9
    names = ("entropy", "max_weight", "first", "self", "prev", "distance", "contribution_norm")
    detectors = {
        d: rng.random(shape).round(4).tolist()
        for d in ("previous_token", "duplicate_token", "induction")
    }
    return {
        "model": model,
        "n_texts": 40,
        "num_layers": LAYERS,
        "num_heads": HEADS,
        "metrics": {n: rng.random(shape).round(4).tolist() for n in names},
        "detectors": detectors,
    }


def _card(html: str, name: str) -> str:
    return re.search(rf'data-testid="overview-{name}">(.*?)</figure>', html, re.S).group(1)


def _cells(card: str) -> list[tuple[int, int, str]]:
    found = re.findall(r'data-layer="(\d+)" data-head="(\d+)" data-value="([^"]+)"', card)
    return [(int(l), int(h), v) for l, h, v in found]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    results = write_long_results(tmp_path_factory.mktemp("kinds") / "results")
    heads = _heads(5)
    (results / "model_heads.json").write_text(json.dumps(heads), encoding="utf-8")
    collected = collect_measured(ReportRequest(results=results, use_model=False))
    return render(collected), heads


def test_every_detector_is_a_grid_of_its_scores_on_one_zero_to_one_scale(page) -> None:
    html, heads = page
    section = html[html.index('<section id="model">') : html.index('<section id="sweeps">')]
    assert "induction" in section and "previous-token" in section
    for name, grid in heads["detectors"].items():
        card = _card(section, name.replace("_", "-"))
        cells = _cells(card)
        assert [(l, h) for l, h, _ in cells] == [
            (l, h) for l in range(LAYERS) for h in range(HEADS)
        ]
        assert [float(v) for *_, v in cells] == pytest.approx(
            [v for row in grid for v in row], rel=1e-3
        )
        assert re.search(r'class="colourbar"><span>0</span>.*<span>1</span>', card)
    # the detectors come first, the induction detector before the others
    order = re.findall(r'data-kind="(\w+)" data-testid="overview-([\w-]+)"', section)
    assert order[0] == ("detector", "induction") and [k for k, _ in order[:3]] == ["detector"] * 3
    grid = heads["detectors"]["induction"]
    value, layer, head = max((v, l, h) for l, row in enumerate(grid) for h, v in enumerate(row))
    assert f"<td>induction</td><td>layer {layer}, head {head}</td><td>{value:.3f}</td>" in section


def test_the_roles_of_the_long_context_run_are_a_grid_of_the_same_model(page) -> None:
    html, _ = page
    roles = long_context_result(model=MODEL).roles
    card = _card(html, "role")
    cells = _cells(card)
    assert [v for *_, v in cells] == [r for row in roles.roles for r in row]
    first = re.search(r'data-layer="0" data-head="0"[^>]*', card).group(0)
    colour = re.search(r'style="background: (#[0-9a-f]+)"', card).group(1)
    assert colour == ROLE_COLOURS[roles.roles[0][0]] and "data-value" in first
    for role, count in roles.counts().items():
        assert f"{role} ({count})" in card


def test_roles_of_another_model_are_not_drawn_beside_these_heads(tmp_path: Path) -> None:
    results = write_long_results(tmp_path / "results", model="another-model")
    write_result(results / "model_heads.json", _load(_heads(6)))
    html = render(collect_measured(ReportRequest(results=results, use_model=False)))
    assert 'data-testid="overview-induction"' in html
    assert 'data-testid="overview-role"' not in html


def _load(data: dict):
    from headlab.results.head_statistics import HeadStatistics

    return HeadStatistics.from_dict(data)

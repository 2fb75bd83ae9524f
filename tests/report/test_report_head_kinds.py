"""The report's "Heads in a trained model" section with a decoder's head detectors (induction,
previous-token, duplicate-token) and, where a long-context run of the same model measured them,
each head's role: the heads display, holding the values of the results files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from long_results import HEADS, LAYERS, long_context_result, write_long_results
from report_pages import collect_measured

from headlab.report import ReportRequest, render
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


def _heads_display(html: str) -> dict:
    section = html[html.index('<section id="model">') : html.index('<section id="kinds">')]
    found = re.search(r'data-hl-kind="heads".*?class="hl-data">(.*?)</script>', section, re.S)
    return json.loads(found.group(1))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    results = write_long_results(tmp_path_factory.mktemp("kinds") / "results")
    heads = _heads(5)
    (results / "model_heads.json").write_text(json.dumps(heads), encoding="utf-8")
    collected = collect_measured(ReportRequest(results=results, use_model=False))
    return render(collected), heads


def test_the_detectors_come_first_induction_first_with_every_score(page) -> None:
    html, heads = page
    display = _heads_display(html)
    assert list(display["detectors"]) == ["induction", "previous_token", "duplicate_token"]
    assert display["first"] == "induction"
    for name, grid in heads["detectors"].items():
        assert display["detectors"][name] == grid
    assert display["metrics"] == heads["metrics"]


def test_the_roles_of_the_long_context_run_of_the_same_model_come_with_them(page) -> None:
    html, _ = page
    roles = long_context_result(model=MODEL).roles
    assert _heads_display(html)["roles"] == roles.roles
    assert "each head's role on one text of" in html


def test_roles_of_another_model_are_not_drawn_beside_these_heads(tmp_path: Path) -> None:
    results = write_long_results(tmp_path / "results", model="another-model")
    write_result(results / "model_heads.json", _load(_heads(6)))
    html = render(collect_measured(ReportRequest(results=results, use_model=False)))
    display = _heads_display(html)
    assert display["first"] == "induction" and display["roles"] is None


def _load(data: dict):
    from headlab.results.head_statistics import HeadStatistics

    return HeadStatistics.from_dict(data)

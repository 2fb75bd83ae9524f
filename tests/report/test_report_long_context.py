"""The report's long-context section, built from results at SmolLM2's size (30 x 9 heads, 8192
tokens): its parts, shown through the notebook's displays (the figures go to the figures folder
only), the displays' data, escaping, and sentences that say only what the numbers hold."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
from long_results import (
    HEADS,
    LAYERS,
    N_TOKENS,
    kv_budget_result,
    long_context_result,
    write_long_results,
)
from report_pages import build

from headlab.report import ReportRequest
from headlab.report.displays.roles_display import budget_rows
from headlab.report.long_context_section import roles_answer

XSS = "<img src=x onerror=alert(1)>"


def _display_data(section: str, kind: str) -> dict:
    match = re.search(
        rf'data-hl-kind="{kind}".*?<script type="application/json" '
        r'class="hl-data">(.*?)</script>',
        section,
        re.S,
    )
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    root = tmp_path_factory.mktemp("long")
    results = write_long_results(root / "results", model=XSS)
    index = build(
        root / "report", ReportRequest(results=results, use_model=False), png=root / "png"
    )
    return index, index.read_text(encoding="utf-8"), root / "png"


def _section(html: str) -> str:
    return html.split('<section id="long-context">')[1].split("</section>")[0]


def test_the_section_has_every_part_and_display(built) -> None:
    _, html, png = built
    section = _section(html)
    for part in (
        "answer-roles",
        "display-roles",
        "answer-kv-budget",
        "display-kv-budget",
    ):
        assert f'data-testid="{part}"' in section, part
    assert "missing-" not in section
    assert "<img" not in section and "data-explorer" not in section  # the displays alone
    for name in ("roles.png", "attention_maps.png", "kv_budget.png"):
        assert (png / name).read_bytes().startswith(b"\x89PNG"), name
    assert "<table" not in section  # the plan sizes are the display's own table
    budget = _display_data(section, "kv-budget")
    assert len(budget["plan_sizes"]) == 4  # one row per plan size


def test_the_model_name_is_text_everywhere(built) -> None:
    _, html, _ = built
    assert XSS not in html and "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(1)&gt; at 8192 tokens" in html
    assert _display_data(_section(html), "roles")["model"] == XSS  # inside the escaped JSON


def test_the_display_holds_every_heads_map_and_profile(built) -> None:
    _, html, _ = built
    data = _display_data(_section(html), "roles")
    result = long_context_result(model=XSS)
    maps = result.maps
    assert maps.block == 128 and data["maps"]["blocks"] == 64  # 8192 tokens in 64 blocks
    assert (data["layers"], data["heads"], data["n_tokens"]) == (LAYERS, HEADS, N_TOKENS)
    assert data["maps"]["bin"] == maps.bin == 16
    bins = data["maps"]["bins"]
    received = np.frombuffer(base64.b64decode(data["maps"]["received"]), "<f4")
    received = received.reshape(LAYERS, HEADS, bins)
    np.testing.assert_allclose(received[21, 4], maps.received[21][4], rtol=1e-6)
    blocked = np.frombuffer(base64.b64decode(data["maps"]["blocked"]), "<f4")
    blocked = blocked.reshape(LAYERS, HEADS, 64, 64)
    np.testing.assert_allclose(blocked[21, 4], maps.blocked[21][4], rtol=1e-6)


def test_sentences_name_a_retrieval_head_only_when_there_is_one() -> None:
    with_heads = roles_answer(long_context_result())
    assert "4 of 270 heads (1%) are retrieval heads" in with_heads
    assert "The strongest retrieval head is layer" in with_heads
    none = roles_answer(long_context_result(retrieval=False))
    assert "0 of 270 heads (0%) are retrieval heads" in none
    assert "strongest" not in none and "every retrieval score is 0" in none


def test_budget_rows_are_the_runs_of_each_size() -> None:
    result = kv_budget_result()
    rows = budget_rows(result)
    assert [row["groups"] for row in rows] == ["27 (30%)", "38 (42%)", "45 (50%)", "54 (60%)"]
    assert rows[1]["saved"] == "1.69x (asked 1.67x)" and rows[0]["saved"] == "1.41x"
    base = result.baseline().perplexity
    chosen = [r for r in result.runs if r.kind == "chosen"][2]
    assert rows[2]["perplexity"] == f"{chosen.perplexity / base - 1:+.1%}"
    assert rows[2]["copy_accuracy"] == f"{chosen.copy_accuracy:.3f}"
    randoms = [r.copy_accuracy for r in result.runs if r.kind == "random" and r.budget == 0.5]
    assert rows[2]["random_copy"] == f"{min(randoms):.3f}\u2026{max(randoms):.3f}"

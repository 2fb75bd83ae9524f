"""The displays as data and HTML: what each carries decodes back to the result it shows, user
text stays inside escaped JSON, the drawers travel once per kernel, a 70,651-edge graph and a
head at 8192 tokens stay within 20 MB, and IPython shows every results type through them."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from display_samples import (
    XSS,
    circuit_run,
    head_pattern,
    head_statistics,
    score_split_result,
    smollm2_edges,
    synthetic_weights,
)
from long_results import kv_budget_result, long_context_result

from headlab.report.displays import Display, send_code_again, show
from headlab.report.displays.circuit_display import INPUTS, circuit_display
from headlab.results.head_pattern_result import (
    ENTRY_BYTES,
    TILE_BUDGET,
    TILE_OVERHEAD,
    HeadPattern,
)
from headlab.results.score_split_result import ScoreSplitResult

MB = 10**6


def data_of(html: str) -> dict:
    found = re.search(r'<script type="application/json" class="hl-data">(.*?)</script>', html)
    assert found is not None
    return json.loads(found.group(1))


def test_user_text_stays_inside_the_json_and_the_fallback_is_escaped():
    html = show(head_statistics()).html()
    assert XSS not in html and "&lt;img src=x" in html  # the fallback: escaped text
    assert data_of(html)["model"] == f"fixture {XSS}"  # the data: the text itself, unescaped


def test_the_drawers_travel_once_per_kernel():
    send_code_again()
    first, second = show(head_statistics())._repr_html_(), show(head_statistics())._repr_html_()
    assert first.count("data-headlab-code") == 2 and "data-headlab-code" not in second
    send_code_again()
    assert show(head_statistics())._repr_html_().count("data-headlab-code") == 2


def test_the_graph_carries_every_edge_strongest_first():
    run = circuit_run(
        [
            "embed->0.g0<k>",
            "0.1->1.g0<v>",
            "0.2->1.1<q>",
            "1.0->logits",
            "mlp.0->1.2<q>",
            "0.0->mlp.1",
        ],
        layers=2,
        heads=3,
        kv=1,
        top=3,
    )
    data = data_of(circuit_display(run).html())
    senders = np.frombuffer(base64.b64decode(data["senders"]), "<u2")
    receivers = np.frombuffer(base64.b64decode(data["receivers"]), "<u2")
    inputs = np.frombuffer(base64.b64decode(data["inputs"]), np.uint8)
    scores = np.frombuffer(base64.b64decode(data["scores"]), "<f4")
    names = data["nodes"]
    got = [
        f"{names[s]}->{names[r]}" + (f"<{INPUTS[i]}>" if INPUTS[i] else "")
        for s, r, i in zip(senders, receivers, inputs, strict=True)
    ]
    expected = sorted(
        zip(run.scores.edges, run.scores.scores, strict=True), key=lambda e: -abs(e[1])
    )
    assert got == [e for e, _ in expected]
    np.testing.assert_allclose(scores, [s for _, s in expected], rtol=1e-6)
    # The default threshold draws the circuit: the top ``run.top`` edges, no more.
    assert (np.abs(scores) >= data["threshold"]).sum() == run.top
    assert circuit_display(run, threshold=0.0).data["threshold"] == 0.0
    with pytest.raises(ValueError, match="threshold must be >= 0, got -1"):
        circuit_display(run, threshold=-1)


def test_smollm2s_whole_graph_is_one_display_under_20_mb():
    assert len(smollm2_edges()) == 70651  # SmolLM2's graph (docs/circuits.md)
    display = show(circuit_run())
    assert display.data["count"] == 70651 and len(display.html()) < 2 * MB
    assert len(repr(circuit_run())) < 200


@pytest.mark.slow
def test_a_head_at_8192_tokens_is_one_display_under_20_mb():
    n = 8192
    pattern = head_pattern(n)
    html = show(pattern).html(code=True)
    assert len(html.encode()) < 20 * MB
    data = data_of(html)
    assert len(data["tokens"]) == n and data["cell"] == 32  # a 256 x 256 overview
    read = HeadPattern.from_dict(data)
    assert read.to_dict() == pattern.to_dict() and data["kept"] == read.kept > 2_000_000
    # every weight at or above the floor is in the page, unrounded; the floor is the lowest
    # that fits: the weights above it would not
    weights = synthetic_weights(n)
    room = (TILE_BUDGET - TILE_OVERHEAD * (n // 256) ** 2) // ENTRY_BYTES  # weights that fit
    lower = np.nextafter(np.float32(read.floor), np.float32(0))
    assert read.causal and read.floor > 0 and (weights >= read.floor).sum() <= room
    assert (weights >= lower).sum() > room
    for q0 in range(0, n, 256):
        for k0 in range(0, q0 + 1, 256):
            block = weights[q0 : q0 + 256, k0 : k0 + 256]
            kept = read.tile_weights(q0, k0)
            if kept is None:
                assert (block < read.floor).all()
                continue
            held = ~np.isnan(kept)
            np.testing.assert_array_equal(kept[held], block[held])
            assert held[block >= read.floor].all()


def test_roles_and_plans_carry_their_results():
    result, plans = long_context_result(), kv_budget_result()
    roles = show(result).data
    assert roles["roles"] == result.roles.roles
    blocks = roles["maps"]["blocks"]
    blocked = np.frombuffer(base64.b64decode(roles["maps"]["blocked"]), "<f4")
    blocked = blocked.reshape(30, 9, blocks, blocks)
    np.testing.assert_allclose(blocked[14, 2], result.maps.blocked[14][2], rtol=1e-6)
    kv = show(plans).data
    assert (kv["layers"], kv["groups"]) == (30, 3)
    assert [r["kind"] for r in kv["runs"]] == [r.kind for r in plans.runs]
    for part in (result, plans, result.roles, result.maps, result.statistics):
        assert len(repr(part)) < 200 and "\n" not in repr(part)  # one line in a terminal


def test_the_score_split_carries_every_pair_the_strongest_first():
    result = score_split_result()
    data = data_of(show(result).html())
    assert ScoreSplitResult.from_dict(data).to_dict() == result.to_dict()
    scores = [p.score for p in result.pairs]
    assert data["first"] == scores.index(max(scores))
    assert show(result, pair=2).data["first"] == 2
    with pytest.raises(ValueError, match="pair must be between 0 and 2, got 3"):
        show(result, pair=3)
    assert len(repr(result)) < 200 and "\n" not in repr(result)


def test_head_statistics_carry_detectors_first_and_roles_of_their_shape():
    stats = head_statistics(5, 7)
    roles = [["local"] * 7 for _ in range(5)]
    data = show(stats, roles=roles).data
    assert data["first"] == "induction" and data["roles"] == roles
    assert data["metrics"] == stats.metrics and data["detectors"] == stats.detectors
    assert show(stats, metric="prev").data["first"] == "prev"
    with pytest.raises(ValueError, match=r"\(5 layers x 7 heads\), got 5 layers x 6 heads"):
        show(stats, roles=[row[:6] for row in roles])


def test_another_type_is_refused():
    with pytest.raises(TypeError, match="expected a results type with a display"):
        show(object())
    with pytest.raises(ValueError, match="metric must be one of"):
        show(head_statistics(), metric="nope")


def test_ipython_shows_every_results_type_through_its_display():
    from IPython.core.interactiveshell import InteractiveShell

    import headlab  # noqa: F401  (in a kernel, its import registers the displays)
    from headlab.report.displays import register_formatters

    shell = InteractiveShell.instance()
    try:
        register_formatters(shell)
        run = circuit_run()
        for result in (
            head_statistics(),
            head_pattern(300),
            run,
            run.faithfulness,
            long_context_result(),
            kv_budget_result(),
            score_split_result(),
        ):
            data, _ = shell.display_formatter.format(result)
            assert 'class="hl-display"' in data["text/html"]
            assert data["text/plain"] == repr(result) and len(repr(result)) < 300
    finally:
        InteractiveShell.clear_instance()
    assert isinstance(show(run), Display)

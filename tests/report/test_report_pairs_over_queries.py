"""The report's part on one head over all its queries (``why-attends --all-queries``): read
through ``PairsOverQueriesResult``, its figure drawn, its strongest pairs listed with their
share of the total, the sentence naming the key side's largest terms, a missing file named with
the command that makes it, a broken one skipped in one line; the page escapes its text."""

from __future__ import annotations

import json

import pytest

from headlab.report.pairs_over_queries_section import FILE, pairs_over_queries_section
from headlab.report.reading import SkippedResultsWarning
from headlab.results.pairs_over_queries_result import PairsOverQueriesResult

COMPONENTS = ["embed", "0.0", "0.1", "mlp.0", "out-bias", "qk-bias"]


def _result() -> PairsOverQueriesResult:
    """Three queries; the matrix's marginals sum to the raw scores' total, 2.75."""
    return PairsOverQueriesResult(
        model="fixture <b>model</b>",
        layer=1,
        head=0,
        kv_group=0,
        text="notes <script>x</script>.txt",
        tokens=["<s>", "<script>x</script>", "b"],
        components=COMPONENTS,
        scale=0.125,
        query_marginal=[1.0, 0.5, 0.25, 1.0, 0.0, 0.0],
        key_marginal=[0.5, -0.25, 2.0, 0.125, 0.0, 0.375],
        pair_rows=["embed", "rest"],
        pair_cols=["0.1", "rest"],
        pair=[[1.0, 0.0], [1.0, 0.75]],
        strongest=[("embed", "0.1", 1.0), ("mlp.0", "0.1", 1.0), ("0.0", "qk-bias", 0.375)],
        keys=[0, 0, 1],
        raw=[1.0, 0.75, 1.0],
    )


def test_the_part_reads_draws_and_says(tmp_path):
    document = {"headlab": PairsOverQueriesResult.KIND, **_result().to_dict()}
    (tmp_path / FILE).write_text(json.dumps(document))
    pngs: dict[str, bytes] = {}
    part = pairs_over_queries_section(tmp_path, pngs)
    assert pngs["why_attends_all_queries.png"].startswith(b"\x89PNG")
    assert part["image"].startswith("data:image/png;base64,")
    assert "head 1.0 of fixture <b>model</b>" in part["title"]  # the template escapes it
    assert "q.k sums to 2.75" in part["answer"]
    assert "0.1 +2, embed +0.5, qk-bias +0.375" in part["answer"]
    assert "2 queries attend the first position" in part["answer"]
    assert part["rows"][0] == {"query": "embed", "key": "0.1", "value": "+1", "share": "+0.364"}


def test_a_missing_file_names_its_command(tmp_path):
    part = pairs_over_queries_section(tmp_path, {})
    assert part["missing"].startswith("headlab why-attends") and "--all-queries" in part["missing"]


def test_a_broken_file_is_skipped_naming_the_field(tmp_path):
    document = {"headlab": PairsOverQueriesResult.KIND, **_result().to_dict()}
    document["keys"] = [0, 2, 1]  # query 1 cannot attend key 2
    (tmp_path / FILE).write_text(json.dumps(document))
    with pytest.warns(SkippedResultsWarning, match="why_attends_all_queries.json"):
        part = pairs_over_queries_section(tmp_path, {})
    assert "keys[1]: expected a key position in 0..1, got 2" in part["skipped"]

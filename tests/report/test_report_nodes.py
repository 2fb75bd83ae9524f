"""The report's node scores (``headlab circuits`` with a node method): read through
``NodeScores``, shown through the notebook's display, a missing file named with the command
that makes it, a broken one skipped with a warning naming the field."""

from __future__ import annotations

import json

import pytest
from node_samples import node_scores

from headlab.report.displays import show
from headlab.report.nodes_section import FILE, nodes_section
from headlab.report.reading import SkippedResultsWarning
from headlab.results.json_store import write_result


def test_the_part_is_the_results_display(tmp_path):
    write_result(tmp_path / FILE, node_scores())
    part = nodes_section(tmp_path)
    assert part["display"] == show(node_scores()).html()
    assert part["title"].startswith("Node scores: induction in tiny <img")  # the page escapes it
    data = show(node_scores()).data
    # -18/7, then -2.5 and +2.5 (a tie: in the nodes' order), then +15/7
    assert [name for name, _ in data["top"][:4]] == ["2.5", "mlp.0", "mlp.2", "2.4"]
    assert len(data["cells"]) == len(node_scores().nodes)


def test_a_missing_file_names_the_command(tmp_path):
    part = nodes_section(tmp_path)
    assert part["file"] == str(tmp_path / FILE)
    assert part["missing"].startswith("headlab circuits") and "head-patching" in part["missing"]


def test_a_broken_file_is_skipped_and_named(tmp_path):
    document = node_scores().to_dict()
    document["heads_per_layer"] = [6, 6]  # the nodes name 3 layers
    (tmp_path / FILE).write_text(json.dumps({"headlab": "circuit-nodes", **document}))
    with pytest.warns(SkippedResultsWarning, match="heads_per_layer"):
        part = nodes_section(tmp_path)
    assert "heads_per_layer" in part["skipped"] and part["missing"].startswith("headlab")

"""Sizes and names in results files are checked against what the file holds, by every reader.

Every results file the report reads (the documents as the report tests and the results' own
classes write them), edited by hand: any name or label replaced by a 300,000-character string is
refused by its type's ``from_dict`` (``Fields.str``: at most ``MAX_NAME`` characters; free text,
``Fields.text``, is read whole and shown as it is), and ``headlab report``'s part for that file
is skipped in one line naming the field, instead of a figure whose title takes minutes and
gigabytes. A head count that the
grids do not hold (``model heads``, node scores) is refused naming the field.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest

from headlab.report.circuits_section import circuits_sections
from headlab.report.long_context_section import long_context_sections
from headlab.report.sections import _results_sections
from headlab.report.why import why_sections
from headlab.results.head_statistics import HeadStatistics
from headlab.results.node_scores import NodeScores
from headlab.results.schema import MAX_NAME
from report.conftest import write_results
from report.long_results import write_long_results
from report.test_report_formation import _document as formation_document
from report.test_report_pairs_over_queries import _result as pairs_over_queries_result
from report.test_report_score_split import _result as score_split_result
from report.test_report_why import _redundancy_doc
from results.test_circuit_run_sizes import _run as circuit_run

LONG = "m" * 300_000
#: The fields a results file holds free text in (``Fields.text``): a description of the texts
#: measured, a prompt, a generated text, numbers encoded in base64.
FREE_TEXT = {"texts", "text", "prompt", "overview", "data"}
BUILDERS = {
    "model_heads.json": _results_sections,
    "model_collapse.json": _results_sections,
    "model_prune.json": _results_sections,
    "circuits.json": circuits_sections,
    "induction-circuit.json": circuits_sections,
    "why_attends.json": circuits_sections,
    "why_attends_all_queries.json": circuits_sections,
    "model_long-context.json": lambda d, pngs: long_context_sections(d, pngs),
    "model_kv-budget.json": lambda d, pngs: long_context_sections(d, pngs),
    "redundancy.json": why_sections,
}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("results")
    write_results(folder)
    write_long_results(folder)
    documents = {
        "induction-circuit.json": {"headlab": "induction-circuit", **formation_document()},
        "why_attends.json": {"headlab": "score-split", **score_split_result().to_dict()},
        "why_attends_all_queries.json": {
            "headlab": "pairs-over-queries",
            **pairs_over_queries_result().to_dict(),
        },
        "circuits.json": {"headlab": "circuits", **circuit_run()},
        "redundancy.json": {"headlab": "redundancy", **_redundancy_doc()},
    }
    for name, document in documents.items():
        (folder / name).write_text(json.dumps(document))
    return folder


def _string_fields(value, path=()):
    """The paths of the strings a document holds as an object's field (the first two items of
    each list walked)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and key != "headlab":
                yield (*path, key)
            yield from _string_fields(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:2]):
            yield from _string_fields(item, (*path, i))


def _set(document, path, value):
    for key in path[:-1]:
        document = document[key]
    document[path[-1]] = value


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_huge_name_is_one_line_in_the_report(results, tmp_path, name):
    document = json.loads((results / name).read_text())
    paths = list(_string_fields(document))
    assert paths, name
    for path in paths:
        edited = copy.deepcopy(document)
        _set(edited, path, LONG)
        folder = tmp_path / "-".join(map(str, path))
        folder.mkdir()
        (folder / name).write_text(json.dumps(edited))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parts = BUILDERS[name](folder, {})
        reasons = [p["skipped"] for p in parts.values() if isinstance(p, dict) and "skipped" in p]
        if path[-1] in FREE_TEXT:  # read whole (the file's size bounds it), shown as it is
            assert not reasons, (path, reasons)
            continue
        assert len(reasons) == 1 and "\n" not in reasons[0], (path, parts)
        assert str(path[-1]) in reasons[0] and f"at most {MAX_NAME}" in reasons[0], reasons


def test_a_head_count_the_grids_do_not_hold_is_refused(results):
    document = json.loads((results / "model_heads.json").read_text())
    HeadStatistics.from_dict(document)
    document["num_heads"] = 2**24
    with pytest.raises(
        ValueError,
        match=r"model-heads\.num_heads: expected 5 \(the heads of the "
        r"widest layer its grids hold\), got 16777216",
    ):
        HeadStatistics.from_dict(document)


def _nodes() -> dict:
    return NodeScores(
        "tiny",
        "nodes",
        "logprob",
        ["0.0", "0.1", "0.g0", "mlp.0", "1.0", "1.1"],
        [0.5, -0.25, 0.125, 1.0, 2.0, 0.0],
        -1.0,
        -3.0,
        [2, 2],
        [1, 2],
    ).to_dict()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d.update(heads_per_layer=[10**12, 2]),
            "circuit-nodes.heads_per_layer[0]: expected 2 (the heads its nodes name in layer 0)",
        ),
        (
            lambda d: d.update(heads_per_layer=[2, 2, 2], kv_heads_per_layer=[1, 2, 2]),
            "circuit-nodes.heads_per_layer: expected 2 layers (those its nodes name)",
        ),
        (
            lambda d: d.update(kv_heads_per_layer=[2, 2]),
            "circuit-nodes.kv_heads_per_layer[0]: expected 1 "
            "(the K/V groups its nodes name in layer 0)",
        ),
        (
            lambda d: d.update(model=LONG),
            f"circuit-nodes.model: expected a name of at most {MAX_NAME} characters, got 300000",
        ),
        (
            lambda d: d["nodes"].__setitem__(0, "1" * 300_000 + ".0"),
            f"circuit-nodes.nodes[0]: expected a string of at most {MAX_NAME} characters",
        ),
        (
            lambda d: d.update(by_position=[[1.0, 2.0]] * 5 + [[1.0]]),
            "circuit-nodes.by_position[5]: expected 2 numbers (one per position)",
        ),
        (
            lambda d: d.update(by_position=[[1.0]] * 7),
            'circuit-nodes.by_position: expected 6 rows (one per node), got "7 rows"',
        ),
    ],
)
def test_node_scores_sizes_are_checked_against_the_nodes(change, message):
    document = _nodes()
    assert NodeScores.from_dict(copy.deepcopy(document)).to_dict() == document
    change(document)
    with pytest.raises(ValueError) as error:
        NodeScores.from_dict(document)
    assert str(error.value).startswith(message), error.value

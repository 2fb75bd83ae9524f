"""``headlab grad``'s and ``headlab params``' results read back: ``CouplingComparison``,
``CouplingSummary`` and ``ParamRow`` through JSON and ``from_dict``, and a document off the schema
refused naming the field, the expected and the received value. The documents come from the
library's own measurements on small set-ups of distinct sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headlab.analysis.coupling import coupling_summary
from headlab.analysis.grad import coupling_comparison
from headlab.analysis.params import parameter_table
from headlab.analysis.scenarios import CompareRequest
from headlab.results.coupling_result import CouplingComparison, CouplingSummary
from headlab.results.param_rows import ParamRow
from headlab.results.schema import Fields


def _json(document: dict) -> dict:
    return json.loads(json.dumps(document))


def _setup(**overrides) -> CompareRequest:
    sizes = {"d_model": 15, "heads": 5, "vs_heads": 1, "seq_len": 7, "output_projection": True}
    return CompareRequest(**{**sizes, **overrides})


@pytest.mark.parametrize("talking_heads", [0.0, 0.5])
def test_a_coupling_comparison_reads_back(talking_heads):
    result = coupling_comparison(_setup(init="normal"), talking_heads)
    back = CouplingComparison.from_dict(_json(result.to_dict()))
    assert back == result  # floats survive JSON exactly; the sides are plain lists
    assert CompareRequest(**back.setup) == _setup(init="normal")


def test_a_coupling_summary_reads_back():
    summary = coupling_summary(d_model=12, num_heads=3, seq_len=5)
    back = CouplingSummary.from_dict(_json(summary.to_dict()))
    assert (back.d_model, back.num_heads, back.seq_len) == (12, 3, 5)
    for a, b in zip(back.matrices, summary.matrices, strict=True):
        assert a.title == b.title and a.off_diagonal_max == b.off_diagonal_max
        np.testing.assert_array_equal(a.matrix, b.matrix)


def _grad_document() -> dict:
    return _json(coupling_comparison(_setup(heads=3, d_model=9, vs_heads=1)).to_dict())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["sides"].pop(),
            r"grad.sides: expected 2 sides \(heads, vs_heads\), got "
            r"\"1 sides\"",
        ),
        (
            lambda d: d["sides"][0]["coupling"].pop(),
            r"grad.sides\[0\].coupling: expected 3 x 3 "
            r"\(block x block\) numbers, got \"2 rows\"",
        ),
        (
            lambda d: d["sides"][1]["coupling"][2].append(0.5),
            r"grad.sides\[1\].coupling\[2\]: "
            r"expected 3 numbers \(a 3 x 3 matrix\), got \[",
        ),
        (
            lambda d: d["sides"][0]["head_gradient_norms"]["w_k"].pop(),
            r"grad.sides\[0\]"
            r".head_gradient_norms.w_k: expected 3 numbers >= 0 \(head\)",
        ),
        (lambda d: d["sides"][0].update(kind="x"), r"grad.sides\[0\].kind: expected \"\" or "),
        (lambda d: d.update(blocks=0), r"grad.blocks: expected an integer >= 1, got 0"),
        (lambda d: d.pop("setup"), r"grad.setup: expected a JSON object, got nothing"),
    ],
)
def test_a_grad_document_off_the_schema_is_refused_naming_the_field(edit, message):
    document = _grad_document()
    CouplingComparison.from_dict(_json(document))
    edit(document)
    with pytest.raises(ValueError, match=message):
        CouplingComparison.from_dict(document)


def test_parameter_rows_read_back_and_add_up():
    rows = parameter_table(60, [1, 2, 3, 5], kv_heads=[1, 3, 5])
    for row in rows:
        assert ParamRow.from_dict(Fields(_json(row.to_dict()), "params[0]")) == row
    document = _json(rows[-1].to_dict())
    document["total"] += 1
    with pytest.raises(
        ValueError,
        match=r"params\[0\].total: expected q_proj \+ kv_proj \+ "
        r"out_proj = \d+, got \d+",
    ):
        ParamRow.from_dict(Fields(document, "params[0]"))

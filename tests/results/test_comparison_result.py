"""``ComparisonResult``, ``FindingRow``, ``ComparedSides`` and ``ScenarioResult``: what
``compare`` measured as plain data. The result is checked against the measurement it was reduced
from (``Comparison``'s tensors), read back through JSON with ``from_dict``, and every schema
error names the field, the expected and the received value."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.analysis.compare import compare
from headlab.analysis.explain import describe, explain
from headlab.analysis.scenarios import CompareRequest, over_draws, run_setup
from headlab.attention.module import MultiHeadAttention
from headlab.results.comparison_result import (
    CODES,
    ComparedSides,
    ComparisonResult,
    FindingRow,
)
from headlab.results.draw_summary import DrawSummary
from headlab.results.scenario_result import ScenarioResult
from headlab.results.schema import Fields

E, H, B, LQ, LK = 15, 5, 2, 7, 11  # distinct sizes


def _measured(vs_heads: int = 1, causal: bool = False):
    m = MultiHeadAttention(E, H, batch_first=True)
    x = torch.randn(B, LQ, E, generator=torch.Generator().manual_seed(3))
    k = torch.randn(B, LK, E, generator=torch.Generator().manual_seed(4))
    if causal:
        return compare(m, m.with_num_heads(vs_heads), x, is_causal=True)
    return compare(m, m.with_num_heads(vs_heads), x, k, k)


def _json(document: dict) -> dict:
    return json.loads(json.dumps(document))


@pytest.mark.parametrize(("vs_heads", "causal"), [(1, False), (H, False), (1, True)])
def test_the_result_says_what_the_tensors_say(vs_heads, causal):
    c = _measured(vs_heads, causal)
    r = c.result()
    assert r.sides.rows == B * LQ == c.rows_equal.numel()
    assert r.sides.equal_rows == int((c.output_a == c.output_b).all(-1).sum())
    assert (r.sides.heads_a, r.sides.head_dim_a) == (H, E // H)
    assert (r.sides.heads_b, r.sides.head_dim_b) == (vs_heads, E // vs_heads)
    assert r.max_abs_diff == float((c.output_a - c.output_b).abs().max())
    assert r.identical == torch.equal(c.output_a, c.output_b)
    for row, finding in zip(r.findings, c.findings, strict=True):
        assert row.fraction == float(finding.rows.float().mean())
        assert row.detail == describe(row.code, row.measures)
    assert [row.code for row in r.findings] == [f.code for f in c.findings]


@pytest.mark.parametrize(("vs_heads", "causal"), [(1, False), (H, False), (1, True)])
def test_the_json_document_reads_back(vs_heads, causal):
    r = _measured(vs_heads, causal).result()
    back = ComparisonResult.from_dict(_json(r.to_dict()))
    assert back == replace(r, sides=None)  # the sides are not in the --json document
    assert ComparedSides.from_dict(Fields(_json(r.sides.to_dict()), "sides")) == r.sides


def test_the_explanation_reads_only_the_plain_result():
    r = _measured().result()
    # Through JSON and back: the explanation is the same, written from plain data alone.
    sides = ComparedSides.from_dict(Fields(_json(r.sides.to_dict()), "sides"))
    again = replace(ComparisonResult.from_dict(_json(r.to_dict())), sides=sides)
    assert explain(again) == explain(r)
    assert f"{r.max_abs_diff:.3g}" in explain(r) and "5 heads of 3 and 1 head of 15" in explain(r)
    with pytest.raises(ValueError, match="explain needs the sides of the comparison"):
        explain(replace(r, sides=None))


def _document() -> dict:
    return _json(_measured(causal=True).result().to_dict())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d.update(verdict="same"),
            r"compare.verdict: expected one of identical, "
            r"close, different, got \"same\"",
        ),
        (
            lambda d: d.update(identical=True),
            r"compare.identical: expected False \(verdict "
            r"different\), got true",
        ),
        (lambda d: d.update(max_abs_diff=-1.0), r"compare.max_abs_diff: expected a number >= 0"),
        (lambda d: d.pop("rel_diff"), r"compare.rel_diff: expected a number >= 0, got nothing"),
        (
            lambda d: d["findings"][0].update(code="why"),
            r"compare.findings\[0\].code: expected "
            r"one of same_config, .*, got \"why\"",
        ),
        (
            lambda d: d["findings"][1].update(fraction=1.5),
            r"compare.findings\[1\].fraction: "
            r"expected a finite number in \[0.0, 1.0\], got 1.5",
        ),
        (
            lambda d: d["findings"][0]["measures"].update(rows="7"),
            r"compare.findings\[0\]"
            r".measures.rows: expected a number, true/false, a list of numbers or null, got \"7\"",
        ),
        (
            lambda d: d["params"].pop("b"),
            r"compare.params.b: expected an integer >= 0, got "
            r"nothing",
        ),
        (lambda d: d["params"].update(c=3), r"compare.params: expected the keys \"a\" and \"b\""),
        (
            lambda d: d.update(gradients_equal=None),
            r"compare.gradients_equal: expected true or "
            r"false, got null",
        ),
    ],
)
def test_a_document_off_the_schema_is_refused_naming_the_field(edit, message):
    document = _document()
    assert ComparisonResult.from_dict(copy.deepcopy(document)).to_dict() == document
    edit(document)
    with pytest.raises(ValueError, match=message):
        ComparisonResult.from_dict(document)


measures = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=4),
    max_size=5,
)
rows = st.builds(
    FindingRow,
    st.sampled_from(CODES),
    st.floats(0.0, 1.0),
    st.text(max_size=20),
    measures,
)


@settings(max_examples=60, deadline=None)
@given(
    findings=st.lists(rows, max_size=4),
    verdict=st.sampled_from(("identical", "close", "different")),
    diffs=st.tuples(st.floats(0.0, 1e30), st.floats(0.0, 1e30)),
    params=st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)),
    gradients_equal=st.booleans(),
)
def test_any_result_reads_back_through_json(findings, verdict, diffs, params, gradients_equal):
    r = ComparisonResult(
        verdict,
        verdict == "identical",
        *diffs,
        gradients_equal,
        findings,
        {"a": params[0], "b": params[1]},
    )
    assert ComparisonResult.from_dict(_json(r.to_dict())) == r


def test_a_scenario_reads_back_with_its_draws():
    setup = CompareRequest(d_model=15, heads=5, seq_len=7, init="normal", output_projection=True)
    result = run_setup(setup).result()
    draws = over_draws({"d_model": 15, "heads": 5, "seq_len": 7}, range(3))
    scenario = ScenarioResult(
        "small",
        "Does it?",
        "headlab compare --d-model 15",
        setup.to_dict(),
        result,
        explain(result),
        draws,
    )
    document = _json(scenario.to_dict())
    back = ScenarioResult.from_dict(document)
    assert back == replace(scenario, comparison=replace(result, sides=None))
    assert CompareRequest(**back.setup) == setup
    assert back.draws.sentence() == draws.sentence()
    document["draws"]["identical"] = [7]
    with pytest.raises(
        ValueError,
        match=r"scenario.draws.identical\[0\]: expected one of the "
        r"seeds, got 7",
    ):
        ScenarioResult.from_dict(document)


def test_draws_are_counted_per_seed():
    """``over_draws`` against each seed's own comparison."""
    overrides = {"d_model": 15, "heads": 5, "seq_len": 7}
    summary = over_draws(overrides, range(3))
    tops = [run_setup(CompareRequest(seed=s, **overrides)).result().top_code for s in range(3)]
    assert summary.findings == {code: tops.count(code) for code in set(tops)}
    assert DrawSummary.from_dict(Fields(_json(summary.to_dict()), "draws")) == summary


def test_importing_the_comparison_results_loads_no_torch():
    probe = (
        "import sys\n"
        "import headlab.results.comparison_result, headlab.results.scenario_result\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "False"

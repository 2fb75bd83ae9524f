"""What the report measures before it draws: its results file round-trips, its explorers decode
back to the weights they encode, and a file that does not follow the schema is refused by field.
No model, no torch: the weights are float64 arrays made here."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.results.attention_views import AttentionView
from headlab.results.binning import bin_edges
from headlab.results.comparison_result import ComparisonResult, FindingRow
from headlab.results.coupling_result import CouplingMatrix, CouplingSummary
from headlab.results.explorers import decoded_views, heatmap_data
from headlab.results.json_store import read_result, write_result
from headlab.results.param_rows import ParamRow
from headlab.results.report_measurements import ReportMeasurements


def weights(layers: int, heads: int, n: int, seed: int) -> np.ndarray:
    """(layer, head, q_pos, k_pos) rows that sum to one, float64."""
    raw = np.random.default_rng(seed).random((layers, heads, n, n)) + 1e-3
    return raw / raw.sum(-1, keepdims=True)


MATRIX = [[1.0, 0.25], [0.25, 1.0]]
COMPARED = ComparisonResult(
    "close",
    False,
    1e-5,
    2e-6,
    True,
    [FindingRow("partition", 1.0, "d", {"rows": 10, "of_rows": 10})],
    {"a": 624, "b": 624},
)


def measurements(n: int = 7) -> ReportMeasurements:
    tokens = [f"w{i}" for i in range(n)]
    text = heatmap_data("text", tokens, [AttentionView("3 heads", weights(1, 3, n, 5))])
    scenario = heatmap_data("s", tokens[:5], [AttentionView("1 head", weights(1, 1, 5, 11))])
    return ReportMeasurements(
        text=" ".join(tokens),
        num_tokens=n,
        total_words=n + 4,
        explorers={"text": text, "scenario-0": scenario},
        scenarios=[
            {
                "name": "a",
                "question": "q?",
                "command": "headlab compare",
                "explanation": "e",
                "explorer": "scenario-0",
                "result": COMPARED.to_dict(),
                "draws": None,
            }
        ],
        params=[ParamRow(2, 2, 6, 156, 312, 156, 624, 0).to_dict()],
        coupling=CouplingSummary(12, 2, 5, [CouplingMatrix("c", np.array(MATRIX), 0.25)]).to_dict(),
        model_problem="the model minilm could not be loaded: no weights",
    )


def test_round_trip_through_the_store(tmp_path):
    result = measurements()
    path = tmp_path / "measurements.json"
    write_result(path, result)
    back = read_result(path, ReportMeasurements)
    assert back == result and back.text_cut and back.model_name is None
    assert json.loads(path.read_text())["headlab"] == "report-measurements"


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 40),
    max_bins=st.integers(1, 13),
    heads=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_decoded_views_are_the_binned_weights_to_the_uint16_step(n, max_bins, heads, seed):
    """Against each cell computed here from the float64 weights."""
    w = weights(2, heads, n, seed)
    explorer = heatmap_data(
        "t", [f"t{i}" for i in range(n)], [AttentionView("v", w)], max_bins=max_bins
    )
    (view,) = decoded_views(explorer)
    edges = bin_edges(n, max_bins)
    # the mass a query of each bin puts on each bin of keys: mean over queries, sum over keys
    binned = np.array(
        [
            [
                [
                    [w[layer, head, a:b, c:d].sum(-1).mean() for c, d in pairwise(edges)]
                    for a, b in pairwise(edges)
                ]
                for head in range(heads)
            ]
            for layer in range(2)
        ]
    )
    scale = binned.max(axis=(-1, -2), keepdims=True)
    assert view.weights.shape == binned.shape
    assert np.all(np.abs(view.weights - binned) <= scale / 65535 / 2 + 1e-15)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["explorers"].pop("text"), r"explorers: expected an explorer named text"),
        (
            lambda d: d["scenarios"][0].update(explorer="nope"),
            r"scenarios\[0\]\.explorer: expected the name of an explorer",
        ),
        (
            lambda d: d["explorers"]["text"]["views"][0]["layers"][0][1].update(data="AAAA"),
            r"explorers\.text\.views\[0\]\.layers\[0\]\[1\]: expected \{scale, data\} of 7 x 7",
        ),
        (
            lambda d: d["explorers"]["text"].update(edges=[0, 3, 2, 7]),
            r"explorers\.text\.edges: expected 8 increasing positions from 0 to 7",
        ),
        (lambda d: d.update(num_tokens=0), r"num_tokens: expected an integer >= 1, got 0"),
        (
            lambda d: d["coupling"]["matrices"][0].update(matrix=[[1.0, "x"], [0.25, 1.0]]),
            r"coupling\.matrices\[0\]\.matrix\[0\]\[1\]: expected a finite number",
        ),
        (
            lambda d: d["coupling"]["matrices"][0]["matrix"].pop(),
            r"coupling\.matrices\[0\]\.matrix\[0\]: expected 1 numbers \(a 1 x 1 matrix\)",
        ),
        (
            lambda d: d["scenarios"][0]["result"].update(verdict="same"),
            r"scenarios\[0\]\.result\.verdict: expected one of identical, close, different",
        ),
        (
            lambda d: d["params"][0].update(total=7),
            r"params\[0\]\.total: expected q_proj \+ kv_proj \+ out_proj = 624, got 7",
        ),
    ],
)
def test_a_file_off_its_schema_is_refused_naming_the_field(tmp_path, edit, message):
    data = json.loads(json.dumps(measurements().to_dict()))
    edit(data)
    with pytest.raises(ValueError, match=message):
        ReportMeasurements.from_dict(data)

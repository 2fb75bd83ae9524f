"""``SummaryRow`` (a sweep's per head count summary) read back: ``summarize`` of final rows
against the mean and standard deviation computed here, through JSON and ``from_dict``, and a row
off the schema refused naming the field."""

from __future__ import annotations

import json
import statistics

import pytest

from headlab.results.schema import Fields
from headlab.results.sweep_summary import SummaryRow, summarize


def _final(run: str, heads: int, kv_heads: int, seed: int, loss: float, accuracy: float) -> dict:
    config = {
        "task": "recall",
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": 30 // heads,
        "seed": seed,
    }
    return {
        "run_id": run,
        "config": config,
        "step": 7,
        "loss": loss,
        "accuracy": accuracy,
        "final": True,
        "head_entropy": [0.5, 1.25, 0.75],
        "params": 977,
        "seconds": 1.5,
    }


ROWS = [
    _final("a", 5, 5, 0, 0.75, 0.5),
    _final("b", 5, 5, 1, 1.25, 0.25),
    _final("c", 3, 1, 0, 2.0, 0.125),
    _final("d", 5, 5, 2, 0.5, 0.75),
]


def test_summaries_read_back_and_hold_the_seed_statistics():
    rows = summarize(ROWS)
    five = next(r for r in rows if r.num_heads == 5)
    assert five.seeds == 3
    assert five.loss_mean == pytest.approx(statistics.fmean([0.75, 1.25, 0.5]))
    assert five.accuracy_std == pytest.approx(statistics.stdev([0.5, 0.25, 0.75]))
    assert five.entropy_mean == pytest.approx(0.8333333333333334)
    for row in rows:
        document = json.loads(json.dumps(row.to_dict()))
        assert SummaryRow.from_dict(Fields(document, "summary[0]")) == row
    older = {k: v for k, v in rows[0].to_dict().items() if k != "attention"}
    assert SummaryRow.from_dict(Fields(older, "summary[0]")).attention == "plain"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_kv_heads", 2, r"summary\[0\].num_kv_heads: expected a divisor of 5 heads, got 2"),
        (
            "accuracy_mean",
            1.5,
            r"summary\[0\].accuracy_mean: expected a finite number in "
            r"\[0.0, 1.0\], got 1.5",
        ),
        ("loss_std", -0.1, r"summary\[0\].loss_std: expected a finite number in \[0.0, None\]"),
        ("attention", "talking", r"summary\[0\].attention: expected one of plain, talking-heads"),
        ("seeds", 0, r"summary\[0\].seeds: expected an integer >= 1, got 0"),
    ],
)
def test_a_summary_row_off_the_schema_is_refused_naming_the_field(field, value, message):
    document = summarize(ROWS)[-1].to_dict()
    document[field] = value
    with pytest.raises(ValueError, match=message):
        SummaryRow.from_dict(Fields(document, "summary[0]"))

"""A circuits results file whose sizes disagree with what it holds is refused by its reader,
naming the field: the head counts against the heads its edges name, the K/V groups against
theirs, the faithfulness curve's circuit sizes against its edges, and a model name longer than
any path. The report then skips the file in one line instead of a MemoryError."""

from __future__ import annotations

import copy

import pytest

from headlab.results.circuit_run import CircuitRun
from headlab.results.schema import MAX_NAME

HEADS, KV = [3, 2], [1, 2]
EDGES = [
    "embed->0.0<q>",
    "embed->0.g0<k>",
    "0.0->1.1<q>",
    "0.2->1.g1<v>",
    "1.0->logits",
    "mlp.0->1.0<q>",
    "0.1->mlp.1",
]


def _run() -> dict:
    return {
        "model": "tiny",
        "task": "induction",
        "method": "eap",
        "steps": None,
        "top": 2,
        "performance": {
            "task": "induction",
            "metric": "logprob",
            "n_pairs": 2,
            "clean": -1.0,
            "corrupted": -2.0,
            "accuracy": 0.5,
            "does_task": True,
        },
        "heads_per_layer": list(HEADS),
        "kv_heads_per_layer": list(KV),
        "scores": {
            "method": "eap",
            "metric": "logprob",
            "edges": list(EDGES),
            "scores": [0.1 * i for i in range(len(EDGES))],
            "clean_metric": -1.0,
            "corrupted_metric": -2.0,
        },
        "faithfulness": {
            "method": "eap",
            "selection": "top",
            "metric": "logprob",
            "edges": 7,
            "fractions": [0.5, 1.0],
            "sizes": [4, 7],
            "faithfulness": [0.5, 1.0],
            "random": [[0.1], [1.0]],
            "cpr": 0.6,
            "cmd": 0.4,
            "random_cpr": [0.3],
            "random_cmd": [0.7],
        },
        "rotary_offsets": None,
    }


def test_a_consistent_file_reads_back():
    run = CircuitRun.from_dict(_run())
    assert run.heads_per_layer == HEADS and run.kv_heads_per_layer == KV
    assert CircuitRun.from_dict(run.to_dict()) == run


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d.update(heads_per_layer=[10**12, 2]),
            "circuits.heads_per_layer[0]: expected 3 (the heads its edges name in layer 0), got ",
        ),
        (
            lambda d: d.update(heads_per_layer=[2, 2]),
            "circuits.heads_per_layer[0]: expected 3 (the heads its edges name in layer 0), got 2",
        ),
        (
            lambda d: d.update(heads_per_layer=[3, 2, 5], kv_heads_per_layer=[1, 2, 5]),
            "circuits.heads_per_layer: expected 2 layers (those its edges name), got [3, 2, 5]",
        ),
        (
            lambda d: d.update(kv_heads_per_layer=[1, 10**9]),
            "circuits.kv_heads_per_layer[1]: expected 2 (the K/V groups its edges name in layer 1)",
        ),
        (
            lambda d: (
                d["scores"]["edges"].__setitem__(3, "0.2->1.1<v>"),
                d.update(kv_heads_per_layer=[1, 3]),
            ),
            "circuits.kv_heads_per_layer[1]: expected a count dividing 2",
        ),
        (
            lambda d: d["faithfulness"].update(sizes=[4, 10**15]),
            "circuits.faithfulness.sizes[1]: expected an integer <= 7 (its edges)",
        ),
        (
            lambda d: d.update(model="m" * (MAX_NAME + 1)),
            f"circuits.model: expected a name of at most {MAX_NAME} characters, got {MAX_NAME + 1}",
        ),
    ],
)
def test_a_size_that_disagrees_with_the_file_is_named(change, message):
    data = copy.deepcopy(_run())
    change(data)
    with pytest.raises(ValueError) as error:
        CircuitRun.from_dict(data, "circuits")
    assert str(error.value).startswith(message), error.value


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"heads_per_layer": [10**12, 2]}, "heads_per_layer[0]"),
        ({"model": "m" * 300_000}, "model"),
    ],
)
def test_the_report_skips_such_a_file_in_one_line(tmp_path, change, field):
    import json
    import warnings

    from headlab.report.circuits_section import circuits_sections

    (tmp_path / "circuits.json").write_text(json.dumps({"headlab": "circuits", **_run(), **change}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part = circuits_sections(tmp_path, {})["circuits"]
    assert "skipped" in part and field in part["skipped"] and "\n" not in part["skipped"], part

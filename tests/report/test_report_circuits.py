"""The report's "Circuits" section: read through ``CircuitRun``, shown through the notebook's
displays (the figures go to the figures folder only), its top edges
listed in order of |score|, a missing file named with the command that makes it, a broken one
skipped with a warning, and the results type read without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from headlab.report.circuits_section import FILE, circuits_sections
from headlab.report.displays import show
from headlab.report.reading import SkippedResultsWarning
from headlab.results.circuit_run import CircuitRun
from headlab.results.output_policy import png_text_chunks

SCORES = {
    "embed->0.g0<k>": 0.25,
    "0.1->1.g0<k>": -1.5,
    "0.2->1.1<q>": 0.75,
    "1.0->logits": 2.0,
    "mlp.0->1.2<q>": -0.125,
}


def _document(model: str = "fixture <b>decoder</b>") -> dict:
    fractions, sizes = [0.2, 0.6, 1.0], [1, 3, 5]
    return {
        "model": model,
        "task": "induction",
        "method": "eap-ig",
        "steps": 3,
        "top": 3,
        "performance": {
            "task": "induction",
            "metric": "logprob",
            "n_pairs": 4,
            "clean": -2.5,
            "corrupted": -9.0,
            "accuracy": 0.25,
            "does_task": False,
        },
        "heads_per_layer": [3, 3],
        "kv_heads_per_layer": [1, 1],
        "scores": {
            "method": "eap-ig",
            "metric": "logprob",
            "edges": list(SCORES),
            "scores": list(SCORES.values()),
            "clean_metric": -2.5,
            "corrupted_metric": -9.0,
        },
        "faithfulness": {
            "method": "eap-ig",
            "selection": "top",
            "metric": "logprob",
            "edges": 5,
            "fractions": fractions,
            "sizes": sizes,
            "faithfulness": [0.5, 0.9, 1.0],
            "random": [[0.0, 0.1], [0.2, 0.4], [1.0, 1.0]],
            "cpr": 0.66,
            "cmd": 0.34,
            "random_cpr": [0.3, 0.35],
            "random_cmd": [0.7, 0.65],
        },
    }


def _write(directory: Path, document: dict) -> None:
    (directory / FILE).write_text(json.dumps({"headlab": "circuits", **document}))


def test_the_section_from_a_results_file(tmp_path):
    _write(tmp_path, _document())
    pngs: dict[str, bytes] = {}
    part = circuits_sections(tmp_path, pngs)["circuits"]
    assert part["does_task"] is False and "does NOT do the task" in part["performance"]
    assert (part["cpr"], part["cmd"], part["edges"]) == ("0.660", "0.340", 5)
    assert set(pngs) == {"circuits.png", "circuits_faithfulness.png"}
    for png in pngs.values():
        assert png_text_chunks(png[:4096]).get("headlab") == "report-figure"
    # the page shows the displays, not the figures: no second view to drift from them
    assert "image" not in part and "curve" not in part and "rows" not in part
    assert part["display"] == show(CircuitRun.from_dict(_document())).html()
    assert 'data-hl-kind="faithfulness"' in part["curve_display"]
    # without a figures folder, the figures are not drawn at all: the page needs none
    unused: dict[str, bytes] = {}
    again = circuits_sections(tmp_path, unused, figures=False)["circuits"]
    assert unused == {} and again["display"] == part["display"]


def test_the_round_trip_of_the_results_type():
    run = CircuitRun.from_dict(_document())
    assert CircuitRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    assert run.top_edges() == sorted(SCORES.items(), key=lambda item: -abs(item[1]))[:3]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"method": "acdc"}, "circuits.method"),
        ({"top": 6}, "circuits.top"),
        ({"kv_heads_per_layer": [1]}, "circuits.kv_heads_per_layer"),
        ({"steps": 0}, "circuits.steps"),
    ],
)
def test_a_broken_file_is_skipped_and_named(tmp_path, change, field):
    _write(tmp_path, {**_document(), **change})
    with pytest.warns(SkippedResultsWarning, match=field):
        part = circuits_sections(tmp_path, {})["circuits"]
    assert part["skipped"].startswith(field) and part["missing"].startswith("headlab circuits")


def test_a_missing_file_names_the_command(tmp_path):
    part = circuits_sections(tmp_path, {})["circuits"]
    assert part["file"] == str(tmp_path / FILE) and part["missing"].startswith("headlab circuits")


def test_the_results_type_reads_without_torch(tmp_path):
    _write(tmp_path, _document())
    code = (
        "import sys; from headlab.results.json_store import read_result; "
        "from headlab.results.circuit_run import CircuitRun; "
        f"r = read_result({str(tmp_path / FILE)!r}, CircuitRun); "
        "assert r.top == 3; assert 'torch' not in sys.modules, 'torch imported'"
    )
    src = Path(__file__).parents[2] / "src"
    done = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(src)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_top_and_greedy_curves_in_one_figure():
    from headlab.report.circuit_figures import faithfulness_curves_figure
    from headlab.results.circuit_edges import FaithfulnessCurve

    def curve(selection, values, cpr):
        return FaithfulnessCurve(
            "eap",
            selection,
            "logprob",
            200,
            [0.01, 0.1, 1.0],
            [2, 20, 200],
            values,
            [[0.0, 0.1], [0.2, 0.3], [1.0, 1.0]],
            cpr,
            1 - cpr,
            [0.3, 0.35],
            [0.7, 0.65],
        )

    curves = [curve("top", [0.1, 0.5, 1.0], 0.6), curve("greedy", [0.3, 0.7, 1.0], 0.8)]
    ax = faithfulness_curves_figure(curves, "t").axes[0]
    drawn = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert drawn["top eap: CPR 0.600, CMD 0.400"] == [0.1, 0.5, 1.0]
    assert drawn["greedy eap: CPR 0.800, CMD 0.200"] == [0.3, 0.7, 1.0]
    assert drawn["random mean: CPR 0.325, CMD 0.675"] == pytest.approx([0.05, 0.25, 1.0])
    with pytest.raises(ValueError, match="no faithfulness curve"):
        faithfulness_curves_figure([], "t")

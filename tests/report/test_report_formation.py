"""The report's part on the induction circuit's formation, from a hand-written
``InductionFormation`` file: the phase change found where the accuracy crosses 0.5 (and none
where it never does), the K-composition and edge effect across it, the strongest edge, the
figure; a missing file named with its command, a broken one skipped and named; the page escapes
the model's text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headlab.report.circuits_section import circuits_sections
from headlab.report.formation_section import FILE
from headlab.report.reading import SkippedResultsWarning
from headlab.results.induction_circuit_result import InductionFormation
from headlab.results.output_policy import png_text_chunks


def _point(step: int, accuracy: float, k: float, effect: float) -> dict:
    return {
        "step": step,
        "loss": 2.0 - accuracy,
        "accuracy": accuracy,
        "previous_head": 1,
        "previous_score": 0.7,
        "induction_head": 2,
        "induction_score": 0.5,
        "k_composition": k,
        "k_baseline": 0.125,
        "edge": "0.1->1.2<k>",
        "patching_effect": effect,
        "clean_metric": -0.1,
        "corrupted_metric": -3.0,
        "k_path_effect": 2 * effect,
    }


def _document() -> dict:
    formed = [
        _point(50, 0.07, 0.13, -0.001),
        _point(100, 0.19, 0.27, -0.16),
        _point(150, 0.82, 0.31, -2.62),
        _point(200, 0.99, 0.32, -1.5),
    ]
    flat = [_point(50, 0.06, 0.12, 0.0), _point(100, 0.11, 0.13, -0.003)]
    k_edges = {
        "edges": ["0.0->1.0<k>", "0.0->1.1<k>", "0.1->1.0<k>", "0.1->1.1<k>"],
        "composition": [0.3, 0.1, 0.2, 0.1],
        "eap": [-2.0, 0.0, -0.5, 0.1],
        "eap_ig": [-1.5, 0.1, -0.4, 0.0],
        "exact": [-1.8, 0.05, -0.6, 0.0],
        "previous_scores": [0.9, 0.1],
        "induction_scores": [0.6, 0.1],
    }
    return {
        "task": "induction",
        "metric": "logprob",
        "runs": [
            {
                "heads": 1,
                "seed": 0,
                "steps": 200,
                "model": "tiny <script>x</script>",
                "checkpoints": formed,
                "k_edges": k_edges,
                "faithfulness": {
                    "method": "eap-ig",
                    "selection": "top",
                    "metric": "logprob",
                    "edges": 100,
                    "fractions": [0.01, 0.02, 0.05, 1.0],
                    "sizes": [1, 2, 5, 100],
                    "faithfulness": [0.25, 0.5, 0.75, 1.0],
                    "random": [[0.0, 0.1], [0.0, 0.2], [0.1, 0.3], [1.0, 1.0]],
                    "cpr": 0.8,
                    "cmd": 0.2,
                    "random_cpr": [0.3, 0.5],
                    "random_cmd": [0.7, 0.5],
                },
            },
            {"heads": 8, "seed": 0, "steps": 200, "model": "tiny", "checkpoints": flat},
        ],
    }


def _write(directory: Path, document: dict) -> None:
    (directory / FILE).write_text(json.dumps({"headlab": "induction-circuit", **document}))


def test_the_part_from_a_results_file(tmp_path):
    _write(tmp_path, _document())
    pngs: dict[str, bytes] = {}
    part = circuits_sections(tmp_path, pngs)["formation"]
    formed, flat = part["rows"]
    assert formed["jump"] == "steps 100-150: accuracy 0.19 -> 0.82"
    assert formed["k_jump"] == "0.270 -> 0.310" and formed["patch_jump"] == "-0.160 -> -2.620"
    assert formed["path_jump"] == "-0.320 -> -5.240"
    assert formed["strongest"] == "-2.620 at step 150"
    assert (formed["final"], formed["k_final"], formed["patch_final"], formed["path_final"]) == (
        "0.990",
        "0.320 (0.125)",
        "-1.500",
        "-3.000",
    )
    assert flat["jump"].startswith("none") and "k_jump" not in flat
    assert formed["k_edges"]["top"]["exact"] == "0.0->1.0 -1.8, 0.1->1.0 -0.6, 0.0->1.1 +0.05"
    assert "k_edges" not in flat and "faithfulness" not in flat
    assert formed["faithfulness"] == (
        "1% (1 edge): 0.25 (random 0.05); 2% (2 edges): 0.50 (random 0.10); 5% (5 edges): 0.75 "
        "(random 0.20); CPR 0.80 (random 0.40) over 100 edges"
    )
    assert list(pngs) == ["induction_circuit.png"]
    assert png_text_chunks(pngs["induction_circuit.png"][:4096]).get("headlab") == "report-figure"
    assert part["image"].startswith("data:image/png;base64,")


def test_spearman_against_a_hand_computed_case():
    k = InductionFormation.from_dict(_document()).runs[0].k_edges
    # exact -1.8, 0.05, -0.6, 0.0 -> ranks 1, 4, 2, 3; composition 0.3, 0.1, 0.2, 0.1 ->
    # ranks 4, 1.5, 3, 1.5; d = rank - 2.5: exact (-1.5, 1.5, -0.5, 0.5), composition
    # (1.5, -1, 0.5, -1): cov = -2.25 - 1.5 - 0.25 - 0.5 = -4.5, var 5 and 4.5
    assert k.spearman("composition") == pytest.approx(-4.5 / (5 * 4.5) ** 0.5)
    assert k.spearman("exact") == pytest.approx(1.0)
    # by size: |exact| 1.8, 0.05, 0.6, 0.0 -> ranks 4, 2, 3, 1; d (1.5, -0.5, 0.5, -1.5)
    # against composition's (1.5, -1, 0.5, -1): cov 2.25 + 0.5 + 0.25 + 1.5 = 4.5
    assert k.spearman("composition", absolute=True) == pytest.approx(4.5 / (5 * 4.5) ** 0.5)


def test_phase_change_is_where_accuracy_crosses_the_level():
    run = InductionFormation.from_dict(_document()).runs[0]
    before, after = run.phase_change(0.9)
    assert (before.step, after.step) == (150, 200)
    assert run.phase_change(0.05) is None  # already above it at the first checkpoint


def test_a_missing_file_names_the_command(tmp_path):
    part = circuits_sections(tmp_path, {})["formation"]
    assert part["file"] == str(tmp_path / FILE) and part["missing"].startswith("headlab formation")


def test_a_broken_file_is_skipped_and_named(tmp_path):
    document = _document()
    document["runs"][0]["checkpoints"][1]["k_composition"] = 1.5
    _write(tmp_path, document)
    with pytest.warns(SkippedResultsWarning, match=r"checkpoints\[1\]\.k_composition"):
        part = circuits_sections(tmp_path, {})["formation"]
    assert part["missing"].startswith("headlab formation")


def test_the_page_shows_the_part_and_escapes_the_models_text(tmp_path):
    _write(tmp_path, _document())
    sections = {"circuits": circuits_sections(tmp_path, {}), "empty": {}, "results_dir": "r"}
    page = _render_circuits(sections)
    assert 'data-testid="figure-formation"' in page and 'data-testid="formation-table"' in page
    assert "steps 100-150: accuracy 0.19 -&gt; 0.82" in page
    assert 'data-testid="formation-models"' in page
    assert 'data-testid="formation-k-edges"' in page
    assert 'data-testid="formation-faithfulness"' in page
    assert "tiny &lt;script&gt;x&lt;/script&gt;" in page and "<script>x</script>" not in page


def _render_circuits(circuits: dict) -> str:
    """Only the circuits section of the template, through its own macros."""
    from jinja2 import Environment, PackageLoader

    env = Environment(
        loader=PackageLoader("headlab.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    source = env.loader.get_source(env, "report.html.j2")[0]
    head = source[: source.index("<header")]
    start, end = source.index('<section id="circuits">'), source.index("</main>")
    return env.from_string(head + source[start:end]).render(s=circuits)


def _seeded() -> dict:
    """The document with h = 1 trained on a second seed that jumps later, and h = 8's flat run
    on a second seed too."""
    document = _document()
    late = [
        _point(50, 0.07, 0.13, 0.0),
        _point(100, 0.1, 0.14, -0.01),
        _point(150, 0.3, 0.2, -0.1),
        _point(200, 0.6, 0.3, -1.0),
    ]
    first, flat = document["runs"]
    document["runs"] = [
        first,
        {**first, "seed": 1, "checkpoints": late, "k_edges": None, "faithfulness": None},
        flat,
        {**flat, "seed": 4},
    ]
    return document


def test_seeds_give_each_jump_and_their_spread(tmp_path):
    result = InductionFormation.from_dict(_seeded())
    assert result.jump_steps() == {1: [(0, 150), (1, 200)], 8: [(0, None), (4, None)]}
    _write(tmp_path, _seeded())
    part = circuits_sections(tmp_path, {})["formation"]
    assert part["seeds"] == 3
    assert part["jumps"] == [
        "h = 1: step 150 (seed 0), 200 (seed 1); mean 175, range 150-200 (2 of 2 seeds)",
        "h = 8: none in 2 seeds",
    ]
    assert [(row["heads"], row["seed"]) for row in part["rows"]] == [(1, 0), (1, 1), (8, 0), (8, 4)]
    page = _render_circuits(
        {"circuits": circuits_sections(tmp_path, {}), "empty": {}, "results_dir": "r"}
    )
    assert 'data-testid="formation-jumps"' in page and "<th>seed</th>" in page
    assert "mean 175, range 150-200" in page
    _write(tmp_path, _document())  # one seed: no seed column, no spread
    part = circuits_sections(tmp_path, {})["formation"]
    assert part["jumps"] == [] and part["seeds"] == 1

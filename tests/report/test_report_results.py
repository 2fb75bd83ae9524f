"""Results files: read per schema, missing -> None, broken -> ValueError naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headlab.report.reading import FILES, read_section


def test_missing_files_read_as_none(tmp_path: Path) -> None:
    for name in FILES:
        assert read_section(tmp_path, name) is None


def test_fixture_files_read_back(results_dir: Path) -> None:
    heads = read_section(results_dir, "model_heads.json")
    assert heads["num_layers"] == 3 and heads["num_heads"] == 5
    assert len(heads["metrics"]["entropy"]) == 3 and len(heads["metrics"]["entropy"][0]) == 5
    assert len(read_section(results_dir, "model_collapse.json")["per_layer"]) == 3
    steps = read_section(results_dir, "model_prune.json")["steps"]
    assert {s["order"] for s in steps} == {"importance", "random"}


def test_sweep_keeps_the_final_record_of_finished_runs(results_dir: Path) -> None:
    finals = read_section(results_dir, "sweep.jsonl")
    assert len(finals) == 12  # 2 tasks x 3 head counts x 2 seeds; the unfinished run is left out
    assert all(r["final"] and r["step"] == 20 for r in finals)


def test_a_transposed_grid_is_rejected(results_dir: Path) -> None:
    path = results_dir / "model_heads.json"
    data = json.loads(path.read_text())
    grid = data["metrics"]["entropy"]
    data["metrics"]["entropy"] = [list(col) for col in zip(*grid, strict=True)]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"model_heads\.json.*entropy: expected 3 x 5"):
        read_section(results_dir, "model_heads.json")


def test_broken_files_name_the_file(results_dir: Path) -> None:
    (results_dir / "model_prune.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"model_prune\.json: not valid JSON"):
        read_section(results_dir, "model_prune.json")
    (results_dir / "sweep.jsonl").write_text('{"run_id": "a"}\n')
    with pytest.warns(UserWarning, match=r"sweep\.jsonl: skipped 1 line .*line 1: missing 'step'"):
        assert read_section(results_dir, "sweep.jsonl") == []


def test_a_torn_last_sweep_line_is_skipped_with_the_sweeps_warning(tmp_path: Path) -> None:
    from headlab.experiments.run_sizing import make_config
    from headlab.results.jsonl_store import TornLineWarning

    config = make_config("multi-lookup", 4, d_model=8)
    row = {
        "run_id": "a1",
        "config": config.to_dict(),
        "step": 10,
        "loss": 0.5,
        "accuracy": 0.9,
        "final": True,
        "head_entropy": None,
        "params": 10,
    }
    (tmp_path / "sweep.jsonl").write_text(json.dumps(row) + "\n" + '{"run_id": "b2", "conf')
    with pytest.warns(TornLineWarning):
        finals = read_section(tmp_path, "sweep.jsonl")
    assert [r["run_id"] for r in finals] == ["a1"]


HAND_EDITS = [
    (
        "model_heads.json",
        lambda d: d.update(metrics={}),
        "metrics: expected a non-empty JSON object, got {}",
    ),
    (
        "model_heads.json",
        lambda d: d.update(num_heads=10**30),
        "num_heads: expected an integer <= 16777216, got 1000000000000000000000000000000",
    ),
    (
        "model_collapse.json",
        lambda d: d.update(all_layers=[]),
        "all_layers: expected a non-empty list, got []",
    ),
    (
        "model_collapse.json",
        lambda d: d.update(per_layer=[]),
        "per_layer: expected a non-empty list, got []",
    ),
    (
        "model_collapse.json",
        lambda d: d["all_layers"][0].update(num_heads=10**30),
        "num_heads: expected an integer <= 16777216",
    ),
    ("model_prune.json", lambda d: d.update(steps=[]), "steps: expected a non-empty list, got []"),
]


@pytest.mark.parametrize(("name", "edit", "message"), HAND_EDITS)
def test_hand_edited_results_are_refused_naming_file_field_expected_and_received(
    results_dir: Path, name, edit, message
) -> None:
    path = results_dir / name
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as refused:
        read_section(results_dir, name)
    assert str(refused.value).startswith(f"{path}: ") and message in str(refused.value)


def test_the_report_skips_a_broken_file_says_which_and_shows_the_rest(
    results_dir: Path, tmp_path: Path
) -> None:
    """A file that does not follow its schema is skipped with one warning naming it; the other
    sections are drawn, and the page says which file was skipped and why."""
    from headlab.report.reading import SkippedResultsWarning
    from headlab.report.sections import _results_sections

    for name, edit, _ in HAND_EDITS[:1] + HAND_EDITS[2:3]:
        path = results_dir / name
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    pngs: dict[str, bytes] = {}
    with pytest.warns(SkippedResultsWarning) as caught:
        sections = _results_sections(results_dir, pngs)
    assert [str(w.message) for w in caught] == [
        f"skipped {results_dir / 'model_heads.json'}: model-heads.metrics: expected a non-empty "
        "JSON object, got {}",
        f"skipped {results_dir / 'model_collapse.json'}: model-collapse.all_layers: expected a "
        "non-empty list, got []",
    ]
    assert sections["heads"]["skipped"].startswith("model-heads.metrics: expected")
    assert "image" in sections["prune"] and "image" in sections["sweep"]
    assert sorted(pngs) == ["prune.png", "sweep.png"]

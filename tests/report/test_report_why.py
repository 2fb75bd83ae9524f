"""The report's "why heads" answers: read through the results types, figures, missing, broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headlab.analysis.expressivity import ExpressivityRequest, measure_expressivity
from headlab.experiments.specialisation import SpecialisationRequest, measure_specialisation
from headlab.report.reading import SkippedResultsWarning
from headlab.report.why import WHY, why_sections


def _redundancy_doc() -> dict:
    return {
        "model": "fixture-encoder",
        "n_texts": 3,
        "embed_dim": 12,
        "qk_width": 12,
        "layers": [
            {"layer": 0, "singular_values": [0.5, 0.3, 0.2], "effective_rank": 2.8, "max_rank": 12}
        ],
        "curve": [
            {
                "rank": 12,
                "fraction": 1.0,
                "original": True,
                "mean_cosine": 1.0,
                "nn_agreement": 1.0,
            },
            {
                "rank": 12,
                "fraction": 1.0,
                "original": False,
                "mean_cosine": 1.0,
                "nn_agreement": 1.0,
            },
            {
                "rank": 3,
                "fraction": 0.25,
                "original": False,
                "mean_cosine": 0.875,
                "nn_agreement": 0.5,
            },
        ],
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("why-results")
    expr = measure_expressivity(
        ExpressivityRequest(
            seq_lens=(5,),
            head_dims=(1, 5),
            targets=1,
            steps=10,
            d_model=12,
            heads=2,
            offset_seq_len=5,
            offset_steps=3,
        )
    )
    spec = measure_specialisation(
        SpecialisationRequest(heads=(1, 2), steps=10, eval_every=5, eval_size=8, d_model=8)
    )
    for name, doc in (
        ("expressivity", expr.to_dict()),
        ("specialisation", spec.to_dict()),
        ("redundancy", _redundancy_doc()),
    ):
        (root / f"{name}.json").write_text(json.dumps({"headlab": name, **doc}))
    return root


def test_sections_have_figures_answers_and_commands(results: Path) -> None:
    pngs: dict[str, bytes] = {}
    sections = why_sections(results, pngs)
    for key in ("expressivity", "specialisation", "redundancy"):
        assert sections[key]["image"].startswith("data:image/png;base64,")
        assert sections[key]["command"].startswith("headlab ")
        assert pngs[f"{key}.png"].startswith(b"\x89PNG")
    assert "nats" in sections["expressivity"]["answer"]
    assert "h=2" in sections["specialisation"]["answer"]
    assert "4x: 0.875" in sections["redundancy"]["answer"]
    assert sections["redundancy_decoder"]["missing"] == WHY["redundancy_decoder"][1]


def test_missing_and_broken_files(tmp_path: Path) -> None:
    sections = why_sections(tmp_path, {})
    assert all("missing" in s for s in sections.values())
    (tmp_path / "expressivity.json").write_text(json.dumps({"headlab": "expressivity", "rank": []}))
    with pytest.warns(
        SkippedResultsWarning, match=r"expressivity\.json: expressivity\.config: expected a JSON"
    ):
        sections = why_sections(tmp_path, {})
    assert sections["expressivity"]["skipped"].startswith("expressivity.config: expected a JSON")
    assert sections["expressivity"]["missing"] == WHY["expressivity"][1]

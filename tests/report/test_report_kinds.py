"""The report's section on encoder-decoders and image models, read from results files: each
part is its display, or one line naming the command that makes its file, or (for a file that
breaks its schema) one line saying it was skipped and why."""

from __future__ import annotations

import json

import pytest
from kind_samples import encoder_decoder_heads, vision_heads

from headlab.report.kinds_section import kinds_sections
from headlab.report.reading import SkippedResultsWarning
from headlab.results.json_store import write_result


def test_missing_files_name_their_commands(tmp_path):
    parts = kinds_sections(tmp_path)
    assert parts["cross"]["missing"].startswith("headlab model heads")
    assert "--image" in parts["vision"]["missing"]


def test_files_become_their_displays_and_a_broken_one_is_skipped(tmp_path):
    write_result(tmp_path / "model_heads-encoder-decoder.json", encoder_decoder_heads())
    broken = vision_heads().to_dict() | {"cls_attention": [[[0.5]]]}
    (tmp_path / "model_heads-vision.json").write_text(
        json.dumps({"headlab": "model-heads-vision", **broken})
    )
    with pytest.warns(SkippedResultsWarning, match="cls_attention"):
        parts = kinds_sections(tmp_path)
    assert 'data-hl-kind="cross"' in parts["cross"]["display"]
    assert "<img" not in parts["cross"]["display"].replace("\\u003cimg", "")
    assert "cls_attention" in parts["vision"]["skipped"]

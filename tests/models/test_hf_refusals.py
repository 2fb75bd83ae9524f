"""The transformers route's refusals, each from an empty folder: remote code only with exactly
``trust_remote_code=True``; a family without text (a vision model) refused in one line, by
``load`` and by ``attach``, and a failed ``attach`` leaves the user's model as it was."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from headlab.models import load
from headlab.models.hf import load_transformers


def _remote_code_folder(tmp_path: Path) -> tuple[Path, Path]:
    """(a folder whose config names its own Python code in auto_map, the file that code writes
    when it runs)."""
    marker = tmp_path / "the checkpoint's code ran"
    folder = tmp_path / "evil"
    folder.mkdir()
    auto_map = {
        "AutoConfig": "modeling_evil.EvilConfig",
        "AutoModel": "modeling_evil.EvilModel",
        "AutoModelForCausalLM": "modeling_evil.EvilModel",
    }
    config = {"model_type": "evil", "auto_map": auto_map, "architectures": ["EvilModel"]}
    (folder / "config.json").write_text(json.dumps(config))
    code = f"open({str(marker)!r}, 'w').write('ran')\n"
    for name in ("modeling_evil.py", "configuration_evil.py"):
        (folder / name).write_text(code)
    return folder, marker


@pytest.mark.parametrize("value", ["no", "False", 1, 0, None, [True]])
@pytest.mark.parametrize("entry", [load, load_transformers])
def test_only_true_runs_remote_code_anything_else_but_false_is_a_type_error(
    entry, value, tmp_path
):
    folder, marker = _remote_code_folder(tmp_path)
    expected = "trust_remote_code must be True or False, got " + re.escape(repr(value))
    with pytest.raises(TypeError, match=expected):
        entry(folder, trust_remote_code=value)
    assert not marker.exists()
    with pytest.raises(ValueError, match=r"own Python code \(auto_map\).*trust_remote_code=True"):
        entry(folder, trust_remote_code=False)
    assert not marker.exists()

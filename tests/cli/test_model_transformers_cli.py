"""``--model`` through transformers on the command line: a checkpoint folder generates, and the
refusals are one line naming the command's flags."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cli_run import run

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from hf_families import text, write_family


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return write_family("gpt2", tmp_path_factory.mktemp("cli") / "gpt2")


def test_generate_runs_a_checkpoint_folder_through_transformers(gpt2_dir, capsys):
    prompt = text(5)
    code, out, err = run(
        ["model", "generate", prompt, "--model", str(gpt2_dir), "--max-new-tokens", "3", "--json"],
        capsys,
    )
    assert code == 0, err
    document = json.loads(out)
    assert document["model"] == "gpt2" and len(document["new_ids"]) == 3


def test_refusals_name_the_flags(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"model_type": "evil", "auto_map": {"AutoConfig": "x.Y"}})
    )
    code, _, err = run(["model", "generate", "w1", "--model", str(folder)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "only with --trust-remote-code" in err
    code, _, err = run(["model", "generate", "w1", "--model", "nobody/absent"], capsys)
    assert code == 2 and f"Hugging Face cache ({tmp_path}); pass --download to fetch" in err
    code, _, err = run(["model", "generate", "w1", "--model", "x", "--backend", "nope"], capsys)
    assert code == 2 and "--backend must be one of headlab, transformers, got 'nope'" in err

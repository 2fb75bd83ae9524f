"""``--model`` through transformers on the command line: a checkpoint folder generates and its
heads are analysed (ablate a head or a whole K/V group, prune by removal or by masking, generate
with heads ablated, the report), and the refusals are one line naming the command's flags."""

from __future__ import annotations

import json

import pytest
from hf_families import text, write_family

from cli_run import run


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


def test_ablate_a_head_and_a_kv_group_through_transformers(hf_dirs, capsys, tmp_path):
    """A Llama folder (6 query heads on 2 K/V heads): head 0.1 and the whole group 1.kv1 (query
    heads 3, 4, 5 of layer 1)."""
    corpus = tmp_path / "corpus.txt"  # words of the tiny vocabulary (others are w0, the padding)
    corpus.write_text("\n".join(text(9, seed) for seed in range(8)), encoding="utf-8")
    args = ["model", "ablate", "--model", str(hf_dirs["llama"]), "--backend", "transformers",
            "--corpus", str(corpus), "--ablate", "0.1,1.kv1", "--n-texts", "8", "--out",
            str(tmp_path / "a.json"), "--json"]  # fmt: skip
    code, out, err = run(args, capsys)
    assert code == 0, err
    document = json.loads(out)
    assert document["heads"] == [[0, 1], [1, 3], [1, 4], [1, 5]]
    assert document["ablated"] != document["baseline"]
    bad = [*args[:-1], "--ablate", "1.kv2"]
    code, _, err = run(bad, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "--ablate 1.kv2: K/V group 2 out of range: the module has 2" in err


def test_prune_refuses_a_fused_layout_and_prunes_it_by_masking(gpt2_dir, capsys, tmp_path):
    args = ["model", "prune", "--model", str(gpt2_dir), "--n-texts", "6", "--max-length", "12",
            "--out", str(tmp_path / "p.json"), "--json"]  # fmt: skip
    code, _, err = run(args, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "family 'gpt2'" in err and "prune by masking instead (--by mask)" in err
    code, out, err = run([*args, "--by", "mask"], capsys)
    assert code == 0, err
    document = json.loads(out)
    assert document["by"] == "mask" and len(document["steps"]) == 22
    assert len({step["params"] for step in document["steps"]}) == 1  # masking keeps them
    code, _, err = run([*args, "--by", "cut"], capsys)
    assert code == 2 and "--by must be removal or mask, got 'cut'" in err


def test_generate_with_heads_ablated_in_every_step(hf_dirs, hf_loaded, capsys):
    from headlab.heads.ablation import ablated

    prompt = text(5, 2)
    args = ["model", "generate", prompt, "--model", str(hf_dirs["llama"]), "--backend",
            "transformers", "--max-new-tokens", "6", "--ablate", "0.kv0,1.2", "--json"]  # fmt: skip
    code, out, err = run(args, capsys)
    assert code == 0, err
    document = json.loads(out)
    heads = [(0, 0), (0, 1), (0, 2), (1, 2)]
    assert document["ablated"] == [list(h) for h in heads]
    model = hf_loaded("llama")
    with ablated(model, heads):
        assert document["new_ids"] == model.generate(prompt, 6)


def test_report_shows_a_checkpoint_through_transformers(hf_dirs, capsys, tmp_path):
    out = tmp_path / "report"
    args = ["report", "--out", str(out), "--text", text(12, 3), "--results", str(tmp_path),
            "--model", str(hf_dirs["qwen3"]), "--backend", "transformers"]  # fmt: skip
    code, printed, err = run(args, capsys)
    assert code == 0, err
    assert printed.strip().endswith("index.html")
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "6 heads" in page and "1 head, same weights" in page
    code, _, err = run([*args[:-1], "headlab"], capsys)
    assert code == 2 and err.count("\n") == 1 and "backend 'headlab' runs minilm" in err


def test_heads_of_a_model_of_64_positions_detect_at_half_its_length(gpt2_dir, capsys, tmp_path):
    """GPT-2 of 64 positions: the detectors' sequences default to 32 tokens (seen twice), the
    same scores as the library's at 32; a length that does not fit twice is refused in one line
    before any statistic runs, 0 leaves the detectors out."""
    from headlab.heads.detectors import default_length
    from headlab.heads.statistics import head_statistics
    from headlab.models import load

    corpus = tmp_path / "corpus.txt"
    texts = [text(9, seed) for seed in range(4)]
    corpus.write_text("\n".join(texts), encoding="utf-8")
    out = tmp_path / "heads.json"
    args = ["model", "heads", "--model", str(gpt2_dir), "--corpus", str(corpus), "--n-texts", "4",
            "--json"]  # fmt: skip
    code, printed, err = run([*args, "--out", str(out)], capsys)
    assert code == 0, err
    model = load(gpt2_dir)
    assert model.max_positions == 64 and default_length(model) == 32
    want = head_statistics(model, texts, max_length=64, detector_length=32)
    assert json.loads(printed)["detectors"] == want.detectors
    code, printed, err = run([*args, "--detector-length", "33", "--out", str(tmp_path / "x")],
                             capsys)  # fmt: skip
    assert code == 2 and printed == "" and err.count("\n") == 1
    assert "--detector-length must be between 2 and 32, got 33" in err
    assert not (tmp_path / "x").exists()
    code, printed, err = run([*args, "--detector-length", "0", "--out", str(tmp_path / "y")],
                             capsys)  # fmt: skip
    assert code == 0, err
    assert "detectors" not in json.loads(printed)

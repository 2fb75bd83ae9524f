"""``--model`` through transformers on the command line: a checkpoint folder generates and its
heads are analysed (ablate a head or a whole K/V group, prune by removal or by masking, generate
with heads ablated, the report), and the refusals are one line naming the command's flags."""

from __future__ import annotations

import json

import pytest
import torch
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
    heads 3, 4, 5 of layer 1), which circuits calls 1.g1: both names are read, 1.g1 written."""
    corpus = tmp_path / "corpus.txt"  # words of the tiny vocabulary (others are w0, the padding)
    corpus.write_text("\n".join(text(9, seed) for seed in range(8)), encoding="utf-8")
    args = [
        "model",
        "ablate",
        "--model",
        str(hf_dirs["llama"]),
        "--corpus",
        str(corpus),
        "--ablate",
        "0.1,1.kv1",
        "--n-texts",
        "8",
        "--out",
        str(tmp_path / "a.json"),
        "--json",
    ]
    code, out, err = run(args, capsys)
    assert code == 0, err
    document = json.loads(out)
    assert document["heads"] == [[0, 1], [1, 3], [1, 4], [1, 5]]
    assert document["ablated"] != document["baseline"]
    same = [
        {"0.1,1.kv1": "0.1,1.g1", str(tmp_path / "a.json"): str(tmp_path / "b.json")}.get(a, a)
        for a in args
    ]
    code, out, err = run(same, capsys)
    assert code == 0, err
    assert json.loads(out)["heads"] == document["heads"]
    bad = [*args[:-1], "--ablate", "1.kv2"]
    code, _, err = run(bad, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "--ablate 1.g2: K/V group 2 out of range: the module has 2" in err


def test_prune_refuses_a_fused_layout_and_prunes_it_by_masking(gpt2_dir, capsys, tmp_path):
    args = [
        "model",
        "prune",
        "--model",
        str(gpt2_dir),
        "--n-texts",
        "6",
        "--max-length",
        "12",
        "--out",
        str(tmp_path / "p.json"),
        "--json",
    ]
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
    args = [
        "model",
        "generate",
        prompt,
        "--model",
        str(hf_dirs["llama"]),
        "--backend",
        "transformers",
        "--max-new-tokens",
        "6",
        "--ablate",
        "0.kv0,1.2",
        "--json",
    ]
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
    args = [
        "report",
        "--out",
        str(out),
        "--text",
        text(12, 3),
        "--results",
        str(tmp_path),
        "--model",
        str(hf_dirs["qwen3"]),
        "--backend",
        "transformers",
    ]
    code, printed, err = run(args, capsys)
    assert code == 0, err
    assert printed.strip().endswith("index.html")
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "6 heads" in page and "1 head, same weights" in page
    code, _, err = run([*args[:-1], "headlab"], capsys)  # once refused: now the same route
    assert code == 0 and "backend 'headlab' no longer chooses anything" in err, err


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
    args = [
        "model",
        "heads",
        "--model",
        str(gpt2_dir),
        "--corpus",
        str(corpus),
        "--n-texts",
        "4",
        "--json",
    ]
    code, printed, err = run([*args, "--out", str(out)], capsys)
    assert code == 0, err
    model = load(gpt2_dir)
    assert model.max_positions == 64 and default_length(model) == 32
    want = head_statistics(model, texts, max_length=64, detector_length=32)
    assert json.loads(printed)["detectors"] == want.detectors
    code, printed, err = run(
        [*args, "--detector-length", "33", "--out", str(tmp_path / "x")], capsys
    )
    assert code == 2 and printed == "" and err.count("\n") == 1
    assert "--detector-length must be between 2 and 32, got 33" in err
    assert not (tmp_path / "x").exists()
    code, printed, err = run(
        [*args, "--detector-length", "0", "--out", str(tmp_path / "y")], capsys
    )
    assert code == 0, err
    assert "detectors" not in json.loads(printed)


PASSAGE = " ".join(f"w{(11 * i) % 97 + 1}" for i in range(12))


def _repeat(seed: int) -> str:
    """55 words of the tiny vocabulary: a 12-word passage, 30 words of filler, the passage."""
    filler = " ".join(f"w{(7 * i + seed) % 89 + 1}" for i in range(30))
    return f"w1 {PASSAGE} {filler} {PASSAGE}"


def test_kv_budget_through_transformers(hf_dirs, hf_eager, capsys, tmp_path):
    """``model kv-budget --backend transformers`` on the tiny Llama folder (which headlab's own
    decoder could run too): the full model's perplexity and copy accuracy equal those of
    transformers' eager logits of the held-out text; every group windowed is one plan."""
    from headlab.heads.repeats import copy_sources
    from headlab.results.head_roles import MIN_MATCH
    from headlab.results.kv_budget_result import KVBudgetResult

    held_out, calibration = tmp_path / "eval.txt", tmp_path / "calibration.txt"
    held_out.write_text(_repeat(3), encoding="utf-8")
    calibration.write_text(_repeat(5), encoding="utf-8")
    out = tmp_path / "kv.json"
    args = [
        "model",
        "kv-budget",
        "--model",
        str(hf_dirs["llama"]),
        "--backend",
        "transformers",
        "--text-file",
        str(held_out),
        "--calibration-file",
        str(calibration),
        "--sinks",
        "2",
        "--window",
        "8",
        "--budgets",
        "0.5,1",
        "--seeds",
        "3",
        "--out",
        str(out),
    ]
    code, printed, err = run(args, capsys)
    assert code == 0, err
    assert "KV budget, llama, 55 tokens, window 2 sinks + 8; 6 copy positions" in printed
    result = KVBudgetResult.from_dict(json.loads(out.read_text()))
    ids = torch.tensor([[int(word[1:]) for word in _repeat(3).split()]])
    with torch.no_grad():
        logits = hf_eager("llama")(input_ids=ids).logits[0, :-1].double()
    sources = copy_sources(ids[0], MIN_MATCH)[:-1]
    copies = sources >= 0
    losses = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    full = result.baseline()
    assert full.perplexity == pytest.approx(float(losses[~copies].mean().exp()), rel=1e-5)
    hits = logits[copies].argmax(-1) == ids[0, 1:][copies]
    assert full.copy_accuracy == pytest.approx(float(hits.double().mean()))
    every = [r for r in result.runs if r.budget == 1.0]
    assert len(every) == 5 and len({round(r.perplexity, 9) for r in every}) == 1  # 3 seeds
    assert every[0].kv_saved == pytest.approx(55 / 10)


def test_corpus_roles_with_either_backend_value_agree(hf_dirs, capsys, tmp_path):
    """``model roles`` on the tiny Llama folder with --backend transformers and headlab (which
    no longer choose anything): the job carries the value (the second run finishes nothing of
    the first's), and the merged statistics and role scores agree (1e-5)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "repeat.txt").write_text(_repeat(2), encoding="utf-8")
    (docs / "other.txt").write_text(_repeat(4), encoding="utf-8")
    (docs / "short.txt").write_text("w1 w2 w3 w4 w5 w6", encoding="utf-8")
    out = tmp_path / "roles.jsonl"

    def roles(backend: str) -> dict:
        summary = tmp_path / f"{backend}.json"
        args = [
            "model",
            "roles",
            "--model",
            str(hf_dirs["llama"]),
            "--backend",
            backend,
            "--documents",
            str(docs),
            "--sinks",
            "2",
            "--window",
            "8",
            "--out",
            str(out),
            "--summary",
            str(summary),
            "--json",
        ]
        code, printed, err = run(args, capsys)
        assert code == 0, err
        assert "3 documents, 0 already finished" in err
        return json.loads(printed)

    ours, theirs = roles("transformers"), roles("headlab")
    assert len(out.read_text().splitlines()) == 6  # three documents, once per backend
    assert ours["corpus"] == theirs["corpus"] and ours["corpus"]["copy_positions"] == 12
    for name, grid in theirs["metrics"].items():
        torch.testing.assert_close(
            torch.tensor(ours["metrics"][name]), torch.tensor(grid), atol=1e-5, rtol=1e-5, msg=name
        )
    for name in ("window_error", "group_window_error", "copy_weight", "retrieval"):
        torch.testing.assert_close(
            torch.tensor(ours["roles"][name]),
            torch.tensor(theirs["roles"][name]),
            atol=1e-5,
            rtol=1e-5,
            msg=name,
        )


@pytest.mark.model
def test_heads_of_minilm_with_a_backend_value_runs(capsys, tmp_path):
    """Once "max_length must be between 3 and 512, got 2" (the statistics' two-token probe):
    the route accepts a cut to [CLS] [SEP], and the value of --backend only earns a warning."""
    out = tmp_path / "heads.json"
    args = [
        "model",
        "heads",
        "--model",
        "minilm",
        "--backend",
        "transformers",
        "--n-texts",
        "8",
        "--out",
        str(out),
        "--json",
    ]
    code, printed, err = run(args, capsys)
    assert code == 0, err
    assert err.count("\n") == 1 and "backend 'transformers' no longer chooses anything" in err
    document = json.loads(printed)
    assert len(document["metrics"]["cls"]) == 6 and len(document["metrics"]["cls"][0]) == 12


@pytest.mark.parametrize(
    "command",
    [
        ["model", "heads", "--n-texts", "2"],
        ["model", "generate", "w3"],
        ["circuits", "--task", "induction", "--length", "20"],
    ],  # fits the model's 64 positions
)
def test_a_folder_without_a_tokenizer_is_refused_before_its_weights_load(
    hf_dirs, tmp_path, capsys, monkeypatch, command
):
    """Every command that opens a model reads text: a folder without tokenizer files was refused
    only once its weights had loaded. transformers' from_pretrained fails here if it is reached,
    so the tokenizer line proves the check ran first."""
    import shutil

    import transformers

    def never(cls, *args, **kwargs):
        raise AssertionError("the weights were loaded before the tokenizer was checked")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(never))
    folder = tmp_path / "no-tokenizer"
    shutil.copytree(hf_dirs["llama"], folder)
    (folder / "tokenizer.json").unlink()
    code, printed, err = run([*command, "--model", str(folder)], capsys)
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1, err
    assert "no-tokenizer has no tokenizer to read text with" in err
    assert "holds no tokenizer.json or tokenizer_config.json" in err


@pytest.mark.parametrize(
    "command",
    [
        ["model", "heads", "--n-texts", "2"],
        ["model", "ablate", "--ablate", "0.1", "--n-texts", "2"],
        ["model", "collapse", "--n-texts", "2"],
        ["model", "importance", "--n-texts", "2"],
    ],
)
def test_a_max_length_past_the_positions_is_refused_before_the_weights_load(
    hf_dirs, capsys, monkeypatch, command
):
    """--max-length against the positions that the config declares (Llama: 64), before the
    load: transformers' from_pretrained fails here if it is reached."""
    import transformers

    def never(cls, *args, **kwargs):
        raise AssertionError("the weights were loaded before --max-length was checked")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(never))
    args = [*command, "--model", str(hf_dirs["llama"]), "--max-length", "100"]
    code, printed, err = run(args, capsys)
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1, err
    assert "--max-length must be between 2 and 64, got 100" in err

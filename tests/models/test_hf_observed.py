"""Families that call transformers' attention interface without the class flag run: support is
decided by observing one forward (models/hf/observe.py), not by ``_supports_attention_backend``.

StableLM and four hybrids (Jamba and Bamba: Mamba layers between attention layers; Falcon-H1:
attention and Mamba-2 side by side in each layer; Qwen3-Next: linear attention, then a gated
attention layer) are loaded from tiny checkpoints that transformers writes, and every statistic
and detector score of their attention layers equals those computed from transformers' own eager
weights (1e-5). A hybrid's blocks without attention are named as having no heads (in the
results' notes, the table and the report). A family that computes its attention itself is
refused in one line.
"""

from __future__ import annotations

import html
import json
import re

import pytest
import torch
from hf_families import OBSERVED_FAMILIES, family, model_class, padded, text, write_family
from test_hf_heads import assert_detectors_equal_eager, assert_statistics_equal_eager

from cli_run import run

#: Each family's attention modules, as the observed forward finds them (call order).
ATTENTION_PATHS = {
    "stablelm": ["model.layers.0.self_attn", "model.layers.1.self_attn"],
    "jamba": ["model.layers.1.self_attn", "model.layers.3.self_attn"],
    "bamba": ["model.layers.1.self_attn"],
    "falcon_h1": ["model.layers.0.self_attn", "model.layers.1.self_attn"],
    "qwen3_next": ["model.layers.1.self_attn"],
}


@pytest.fixture(scope="module")
def observed_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("observed")
    return {name: write_family(name, root / name) for name in OBSERVED_FAMILIES}


@pytest.fixture(scope="module")
def observed_models(observed_dirs):
    """Family name -> (headlab's route, transformers' eager model), loaded on first use."""
    from headlab.models.hf import load_transformers

    cache = {}

    def get(name):
        if name not in cache:
            eager = model_class(family(name)).from_pretrained(
                observed_dirs[name], attn_implementation="eager", dtype=torch.float32
            )
            cache[name] = (load_transformers(observed_dirs[name]), eager.eval())
        return cache[name]

    return get


@pytest.mark.parametrize("name", OBSERVED_FAMILIES)
def test_the_family_has_no_flag_and_runs(name, observed_models):
    model, eager = observed_models(name)
    assert type(eager)._supports_attention_backend is False  # the flag would have refused it
    assert [layer.path for layer in model.attention_layers()] == ATTENTION_PATHS[name]
    ids, mask = padded(3)
    with torch.no_grad():
        want = eager(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(model.logits(ids, mask)[real], want[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", OBSERVED_FAMILIES)
def test_statistics_equal_eager_weights(name, observed_models):
    assert_statistics_equal_eager(*observed_models(name), *padded(4))


@pytest.mark.parametrize("name", OBSERVED_FAMILIES)
def test_detectors_equal_eager_weights(name, observed_models):
    assert_detectors_equal_eager(*observed_models(name))


def test_observing_decides_support_not_the_flag():
    from headlab.models.hf.families import observe_family, supports

    for name in (
        "stablelm",
        "jamba",
        "zamba2",
        "falcon_h1",
        "qwen3_next",
        "nemotron_h",
        "olmo_hybrid",
        "qwen3_5",
        "llama",
        "bert",
    ):
        assert supports(name), name
    # Bamba's default config has no attention layer: observed again with its layers set to
    # attention (attn_layer_indices)
    assert observe_family("bamba").module == "BambaAttention"
    assert observe_family("mamba").module is None and observe_family("mamba").error is None
    assert observe_family("t5").error == "an encoder-decoder"
    # a default config that transformers' own validation refuses is no call, not a crash
    assert observe_family("gemma4_assistant").error.startswith("no default config")


def test_a_family_that_computes_its_attention_itself_is_refused_in_one_line(tmp_path, capsys):
    import transformers

    from headlab.models.hf import attach

    config = transformers.MptConfig(d_model=12, n_heads=3, n_layers=2, vocab_size=11)
    assert transformers.MptForCausalLM._supports_attention_backend is False
    folder = tmp_path / "mpt"
    torch.manual_seed(0)
    transformers.MptForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    capsys.readouterr()  # transformers' own bar while writing
    code, out, err = run(["model", "generate", "w1", "--model", str(folder)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "family 'mpt' (MptModel) computes its attention itself" in err
    assert "one observed forward called none" in err and "Traceback" not in err
    with pytest.raises(ValueError, match=r"family 'mpt' \(MptForCausalLM\) computes its"):
        attach(transformers.MptForCausalLM(config))


#: A hybrid's blocks without heads, named in one line (models/hf/hybrid.py).
BLOCK_NOTES = {
    "stablelm": [],
    "falcon_h1": [],  # attention and Mamba-2 side by side: every block has heads
    "jamba": [
        "attention layers 0, 1 are the model's blocks 1, 3 (of 4, model.layers); "
        "blocks 0, 2 (linear_attention) have no heads"
    ],
    "bamba": [
        "attention layer 0 is the model's block 1 (of 3, model.layers); blocks 0, 2 "
        "(linear_attention) have no heads"
    ],
    "qwen3_next": [
        "attention layer 0 is the model's block 1 (of 2, model.layers); block 0 "
        "(linear_attention) has no heads"
    ],
}


@pytest.mark.parametrize("name", OBSERVED_FAMILIES)
def test_a_hybrids_blocks_without_heads_are_named(name, observed_models):
    from headlab.heads.statistics import head_statistics

    model, _ = observed_models(name)
    assert model.layer_notes() == BLOCK_NOTES[name]
    result = head_statistics(model, [text(7, 1), text(5, 2)], max_length=20, detector_length=0)
    assert result.notes[len(result.notes) - len(BLOCK_NOTES[name]) :] == BLOCK_NOTES[name]
    assert len(result.metrics["entropy"]) == model.num_layers  # attention layers only


def test_the_table_the_results_and_the_report_name_the_blocks_without_heads(
    observed_dirs, tmp_path, capsys
):
    from headlab.analysis.report_measuring import measure_report
    from headlab.report import ReportRequest, build_report

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(text(8, seed) for seed in range(4)), encoding="utf-8")
    results = tmp_path / "results"
    args = [
        "model",
        "heads",
        "--model",
        str(observed_dirs["jamba"]),
        "--corpus",
        str(corpus),
        "--n-texts",
        "4",
    ]
    code, out, err = run([*args, "--out", str(results / "model_heads.json"), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["notes"] == BLOCK_NOTES["jamba"]
    code, out, err = run([*args, "--out", str(tmp_path / "t.json")], capsys)
    assert code == 0, err
    assert f"note: {BLOCK_NOTES['jamba'][0]}" in " ".join(out.split())
    options = ReportRequest(text="w1 w2", results=results)
    page = build_report(tmp_path / "report", options, measure_report(options))
    shown = re.findall(r'data-testid="heads-note">(.*?)</p>', page.read_text())
    assert [html.unescape(note) for note in shown] == [f"Note: {BLOCK_NOTES['jamba'][0]}."]


def test_the_families_command_lists_what_the_observation_passes(monkeypatch, capsys, tmp_path):
    """On four families (all of them take minutes): one that calls the interface without the
    flag, one that computes its attention itself, one whose default config does not build (its
    checkpoints' configs may), and an encoder-decoder."""
    from headlab.models.hf import families

    monkeypatch.setenv("HEADLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(families, "text_families", lambda: ["stablelm", "bloom", "dbrx", "t5"])
    code, out, err = run(["model", "families", "--json"], capsys)
    assert code == 0, err
    document = json.loads(out)
    assert document["families"] == ["stablelm"]
    assert list(document["not_observed"]) == ["dbrx"]
    assert document["not_observed"]["dbrx"].startswith("its default config does not build")
    code, out, err = run(["model", "families"], capsys)
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[:2] == ["stablelm", "not observed (1; a checkpoint's own config may still run):"]
    assert lines[2].startswith("  dbrx: its default config does not build") and len(lines) == 3
    assert max(len(line) for line in lines) <= 80

"""Loading through transformers: folders, cached hub ids, models in memory, the backend choice,
and every refusal before any weight is read (one line each)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hf_families import build, text

from headlab.models import load
from headlab.models.hf import TransformersModel, attach
from headlab.models.hf.families import supports


def _config_only(tmp_path: Path, **config) -> Path:
    """A folder holding only config.json: a refusal here proves no weight was needed."""
    folder = tmp_path / str(config.get("model_type", "x"))
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def test_every_model_takes_the_one_route(hf_dirs):
    """Folders of every family, those headlab once rebuilt itself included, load as transformers
    models on headlab's attention."""
    for family in ("gpt2", "llama", "bert"):
        model = load(hf_dirs[family])
        assert isinstance(model, TransformersModel), family
        assert model.model.config._attn_implementation == "headlab"


def test_the_backend_is_accepted_with_a_warning_that_it_chooses_nothing(hf_dirs):
    from headlab.models.load import RetiredOption

    plain = load(hf_dirs["llama"])
    for backend in ("headlab", "transformers"):
        with pytest.warns(RetiredOption, match=f"backend '{backend}' no longer chooses anything"):
            through = load(hf_dirs["llama"], backend=backend)
        assert isinstance(through, TransformersModel)
        batch = through.tokenize([text(8)])
        torch.testing.assert_close(through.run(batch), plain.run(batch), atol=0, rtol=0)
    with pytest.raises(ValueError, match="backend must be one of headlab, transformers, got 'x'"):
        load(hf_dirs["gpt2"], backend="x")


def test_a_mistral_folder_with_a_sliding_window_runs_and_applies_its_window(hf_dirs, hf_eager):
    """Once refused by the hand-built route ("a sliding window (4) is not supported"): the
    route runs it, and a text longer than the window gives transformers' eager logits."""
    model = load(hf_dirs["mistral"])
    assert model.config.sliding_window == 4
    batch = model.tokenize([text(11)])
    with torch.no_grad():
        expected = hf_eager("mistral")(input_ids=batch.input_ids).logits
    torch.testing.assert_close(model.run(batch), expected, atol=1e-5, rtol=1e-5)


def test_the_adapter_tokenizes_runs_and_scores(hf_loaded):
    model = hf_loaded("qwen3")
    batch = model.tokenize([text(9), text(4, 1)], max_length=6)
    assert batch.input_ids.shape == (2, 6) and batch.attention_mask.sum(1).tolist() == [6, 4]
    assert batch.tokens[1] == text(4, 1).split()
    assert model.run(batch).shape == (2, 6, 101)
    assert model.objective([text(9)]).ndim == 0
    sizes = (model.num_layers, model.heads_per_layer, model.kv_heads_per_layer)
    assert sizes == (2, [6, 6], [2, 2])
    encoder = hf_loaded("bert")
    assert encoder.causal is False and encoder.run(encoder.tokenize([text(5)])).shape == (1, 36)
    masked = model.run(batch, head_mask=[None, torch.tensor([1.0, 0, 1, 1, 1, 1])])
    assert not torch.allclose(masked, model.run(batch))  # head masks arrived with issue 22
    with pytest.raises(ValueError, match=r"head_mask must have shape \(num_heads,\)=\(6,\)"):
        model.run(batch, head_mask=[None, torch.ones(5)])


def test_attach_wraps_a_model_in_memory(hf_dirs):
    from transformers import PreTrainedTokenizerFast

    import headlab

    assert headlab.attach is attach

    model = build("gpt_neox")
    ids = torch.tensor([[5, 9, 3, 7, 1]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(hf_dirs["gpt_neox"] / "tokenizer.json"))
    wrapped = attach(model, tokenizer)
    assert wrapped.model is model and model.config._attn_implementation == "headlab"
    torch.testing.assert_close(wrapped.logits(ids), expected, atol=1e-5, rtol=1e-5)
    assert wrapped.encode("w5 w9") == [5, 9]
    with pytest.raises(ValueError, match="expected a transformers PreTrainedModel, got Linear"):
        attach(torch.nn.Linear(2, 2))


def test_a_family_outside_the_interface_is_refused_before_any_weight(tmp_path):
    import transformers

    folder = _config_only(tmp_path, model_type="bloom", hidden_size=8, n_layer=1, n_head=2)
    with pytest.raises(ValueError, match=r"family 'bloom' \(BloomModel\) computes its attention "):
        load(folder)
    config = transformers.BloomConfig(hidden_size=8, n_layer=1, n_head=2, vocab_size=11)
    with pytest.raises(ValueError, match=r"family 'bloom'.*`headlab model families`"):
        attach(transformers.BloomForCausalLM(config))


def test_an_encoder_decoder_is_refused(tmp_path):
    folder = _config_only(tmp_path, model_type="t5", d_model=8, num_layers=1, num_heads=2)
    with pytest.raises(ValueError, match="family 't5' is an encoder-decoder"):
        load(folder)


def test_remote_code_never_runs_without_the_flag(tmp_path):
    marker = tmp_path / "ran"
    folder = _config_only(
        tmp_path,
        model_type="evil",
        auto_map={"AutoConfig": "modeling_evil.EvilConfig"},
    )
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    with pytest.raises(ValueError, match=r"own Python code \(auto_map\).*trust_remote_code=True"):
        load(folder)
    assert not marker.exists()
    (folder / "config.json").write_text(json.dumps({"model_type": "evil"}))
    with pytest.raises(ValueError, match=r"model_type 'evil' is not a family transformers"):
        load(folder)


def test_pickled_weights_are_never_loaded(hf_dirs, tmp_path):
    folder = _copy(hf_dirs["gpt2"], tmp_path)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    (folder / "pytorch_model.bin").write_bytes(b"never unpickled")
    with pytest.raises(ValueError, match=r"no \*\.safetensors weights \(found pytorch_model\.bin"):
        load(folder)


def test_a_checkpoint_too_large_is_refused_with_the_estimate(tmp_path, monkeypatch):
    import headlab.limits

    monkeypatch.setattr(headlab.limits, "machine_memory", lambda: 8 * 2**30)
    folder = _config_only(
        tmp_path, model_type="gpt2", n_embd=2048, n_layer=24, n_head=16, vocab_size=50257
    )
    pattern = r"gpt2 \(1,313,626,112 parameters in float32\) needs about 4\.9 GiB"
    with pytest.raises(ValueError, match=pattern + ".*8.0 GiB of memory"):
        load(folder)


def _fake_hub_cache(cache: Path, repo_id: str, folder: Path) -> None:
    """huggingface_hub's cache layout: models--owner--name/{refs/main, snapshots/<commit>/}."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / "0123abc")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")


def test_hub_ids_come_from_the_local_cache_only(hf_dirs, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    _fake_hub_cache(tmp_path, "someone/tiny-olmo2", hf_dirs["olmo2"])
    model = load("someone/tiny-olmo2")
    assert isinstance(model, TransformersModel) and model.name == "someone/tiny-olmo2"
    with pytest.raises(FileNotFoundError, match=r"not in the local Hugging Face cache.*download="):
        load("someone/absent")
    with pytest.raises(ValueError, match="downloading needs the network, but HF_HUB_OFFLINE"):
        load("someone/absent", download=True)


def test_a_folder_without_a_tokenizer_still_runs_on_ids(hf_dirs, tmp_path):
    folder = _copy(hf_dirs["phi3"], tmp_path)
    (folder / "tokenizer.json").unlink()
    model = load(folder)
    assert model.logits(torch.tensor([[3, 4, 5]])).shape == (1, 3, 101)
    with pytest.raises(ValueError, match=r"has no tokenizer: its folder .* holds no tokenizer"):
        model.tokenize(["w3"])
    attached = attach(build("phi3"))  # a model in memory: name the argument to pass
    with pytest.raises(ValueError, match=r"has no tokenizer: pass tokenizer= to headlab.attach"):
        attached.tokenize(["w3"])


def test_the_supported_families_are_read_from_transformers():
    """(supported_families() applies ``supports`` to every text family: ten seconds.)"""
    for family in ("llama", "qwen3", "gemma2", "gpt2", "gpt_neox", "gpt_oss", "bert"):
        assert supports(family), family
    for family in ("bloom", "t5", "xglm", "no-such-family"):
        assert not supports(family), family

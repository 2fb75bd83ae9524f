"""Malformed model files: one ValueError naming the file and the field, before any weight is read
or any model built; a config declaring a million layers is refused from what its file holds."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf_files import HEAD_DIM, HEADS, KV_HEADS, TOKENS, WIDTH, write_llama_gguf
from tokenizers import Tokenizer, models

from cli_run import run
from headlab.models import load
from model_files import edited_copy

HINT = "backend='transformers'"


def test_a_written_gguf_gives_transformers_logits(tmp_path):
    """The baseline of the malformed files below loads, and agrees with transformers' own GGUF
    reader (which undoes llama.cpp's rotary row order itself)."""
    import transformers

    path = write_llama_gguf(tmp_path / "tiny.gguf")
    ours = load(path)
    assert ours.heads_per_layer == [HEADS, HEADS] and ours.kv_heads_per_layer == [KV_HEADS] * 2
    reference = transformers.LlamaForCausalLM.from_pretrained(
        str(tmp_path), gguf_file="tiny.gguf", attn_implementation="eager", dtype=torch.float32
    ).eval()
    ids = torch.randint(0, len(TOKENS), (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = reference(ids).logits
    torch.testing.assert_close(ours.logits(ids), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("metadata", "tensors", "message"),
    [
        ({"llama.attention.head_count": None}, {}, "'llama.attention.head_count' is missing"),
        ({"llama.attention.head_count": 0}, {}, "llama.attention.head_count must be between 1"),
        ({"llama.attention.head_count_kv": 0}, {}, "llama.attention.head_count_kv must be betw"),
        ({"llama.attention.head_count": "six"}, {}, "'llama.attention.head_count' must be int"),
        ({"llama.attention.head_count": [4, 4]}, {}, "'llama.attention.head_count' must be int"),
        (
            {"llama.attention.layer_norm_rms_epsilon": "tiny"},
            {},
            "'llama.attention.layer_norm_rms_epsilon' must be a number, got 'tiny'",
        ),
        (
            {"llama.attention.head_count": 5},
            {},
            "llama.embedding_length=24 is not divisible by llama.attention.head_count=5",
        ),
        (  # a head count that does not fit the tensors
            {"llama.attention.head_count": 2, "llama.rope.dimension_count": HEAD_DIM},
            {},
            "tensor 'blk.0.attn_q.weight' has shape (24, 24), its metadata says (12, 24) "
            "(llama.attention.head_count=2, llama.rope.dimension_count=6",
        ),
        (
            {"llama.attention.head_count": 3, "llama.attention.head_count_kv": 1},
            {},
            "tensor 'blk.0.attn_k.weight' has shape (12, 24), its metadata says (8, 24) "
            "(llama.attention.head_count_kv=1, head size llama.embedding_length / "
            "llama.attention.head_count=8",
        ),
        (  # a tokenizer whose ids exceed the model's vocabulary
            {"llama.vocab_size": 20},
            {"token_embd.weight": np.zeros((20, WIDTH), np.float32)},
            "token ids go up to 28, beyond the model's vocabulary (llama.vocab_size=20",
        ),
        ({}, {"blk.1.ffn_up.weight": None}, "tensor 'blk.1.ffn_up.weight' is missing"),
    ],
)
def test_a_malformed_gguf_names_the_file_and_the_field(
    tmp_path, monkeypatch, metadata, tensors, message
):
    from headlab.models.gguf import GgufFile

    path = write_llama_gguf(tmp_path / "bad.gguf", metadata, tensors)
    monkeypatch.setattr(GgufFile, "read", lambda *_: pytest.fail("a tensor was dequantised"))
    with pytest.raises(ValueError) as error:
        load(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert HINT not in str(error.value)  # malformed, not merely unsupported


def llama_folder(tiny_llama_dir: Path, tmp_path: Path, **changes) -> Path:
    return edited_copy(tiny_llama_dir, tmp_path / "llama", **changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_attention_heads": 0}, "num_attention_heads must be between 1 and"),
        ({"num_attention_heads": [6]}, "'num_attention_heads' must be int, got [6]"),
        ({"num_attention_heads": "six"}, "'num_attention_heads' must be int, got 'six'"),
        ({"num_key_value_heads": 0}, "num_key_value_heads must be between 1 and"),
        ({"rope_scaling": "linear"}, "'rope_scaling' must be a JSON object, got 'linear'"),
        ({"rope_scaling": {"rope_type": 3}}, "'rope_scaling.rope_type' must be a string, got 3"),
        ({"rms_norm_eps": "tiny"}, "'rms_norm_eps' must be a number, got 'tiny'"),
        ({"rms_norm_eps": -1.0}, "rms_norm_eps must be a finite number > 0, got -1.0"),
        ({"max_position_embeddings": 1}, "max_position_embeddings must be between 2 and"),
        ({"tie_word_embeddings": "no"}, "'tie_word_embeddings' must be true or false, got 'no'"),
        ({"intermediate_size": 44}, "has shape (43, 60), config.json says (44, 60)"),
    ],
)
def test_a_malformed_llama_config_names_the_file_and_the_field(
    tiny_llama_dir, tmp_path, monkeypatch, changes, message
):
    from headlab.models.weight_files import SafetensorsFiles

    folder = llama_folder(tiny_llama_dir, tmp_path, **changes)
    monkeypatch.setattr(SafetensorsFiles, "read", lambda *_: pytest.fail("a weight was read"))
    with pytest.raises(ValueError) as error:
        load(folder)
    assert message in str(error.value) and str(folder) in str(error.value)
    assert HINT not in str(error.value)


def test_a_tokenizer_beyond_the_vocabulary_is_refused(tiny_llama_dir, tmp_path, monkeypatch):
    from headlab.models.weight_files import SafetensorsFiles

    folder = llama_folder(tiny_llama_dir, tmp_path)
    vocab = {f"t{i}": i for i in range(97)} | {"big": 500}
    Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0")).save(str(folder / "tokenizer.json"))
    monkeypatch.setattr(SafetensorsFiles, "read", lambda *_: pytest.fail("a weight was read"))
    with pytest.raises(
        ValueError,
        match=r"tokenizer\.json: token ids go up to 500, beyond the model's vocabulary "
        r"\(vocab_size=97: ids 0 to 96\)",
    ):
        load(folder)


def test_only_an_unsupported_file_points_to_transformers(tiny_llama_dir, tmp_path):
    folder = llama_folder(tiny_llama_dir, tmp_path, rope_scaling={"rope_type": "linear"})
    with pytest.raises(ValueError, match=r"config\.json: only plain rotary.*backend='transformers"):
        load(folder)


def bert_copy(tiny_dir: Path, tmp_path: Path, **changes) -> Path:
    return edited_copy(tiny_dir, tmp_path / "bert", **changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_position_embeddings": 1}, "config.json: max_position_embeddings must be between 2"),
        ({"vocab_size": 30000}, "token ids go up to 30521, beyond the model's vocabulary"),
        ({"num_attention_heads": [3]}, "config.json: 'num_attention_heads' must be int, got [3]"),
    ],
)
def test_a_malformed_bert_config_names_the_file_and_the_field(tiny_dir, tmp_path, changes, message):
    with pytest.raises(ValueError, match=None) as error:
        load(bert_copy(tiny_dir, tmp_path, **changes))
    assert message in str(error.value)


@pytest.mark.parametrize("where", ["cli", "library"])
def test_a_gguf_declaring_a_million_layers_is_refused_at_once(tmp_path, monkeypatch, capsys, where):
    """A small file that declares a million layers: refused from the tensors it holds, in well
    under a second, before the model is built or any tensor dequantised."""
    from headlab.models import load_decoder
    from headlab.models.gguf import GgufFile

    path = write_llama_gguf(tmp_path / "deep.gguf", {"llama.block_count": 1_000_000})
    assert path.stat().st_size < 64_000
    monkeypatch.setattr(GgufFile, "read", lambda *_: pytest.fail("a tensor was dequantised"))
    monkeypatch.setattr(load_decoder, "LlamaDecoder", lambda *_: pytest.fail("model built"))
    start = time.perf_counter()
    if where == "cli":
        code, _, err = run(["model", "generate", "abc", "--model", str(path)], capsys)
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        message = err
    else:
        with pytest.raises(ValueError) as error:
            load(path)
        message = str(error.value)
    assert time.perf_counter() - start < 5
    assert "tensor 'blk.2.attn_q.weight' is missing" in message
    assert "(llama.block_count=1000000," in message and "but the file holds" in message


def test_a_config_declaring_a_million_layers_is_refused_at_once(
    tiny_llama_dir, tiny_dir, tmp_path, monkeypatch
):
    from headlab.models import load_decoder
    from headlab.models.weight_files import SafetensorsFiles

    monkeypatch.setattr(SafetensorsFiles, "read", lambda *_: pytest.fail("a weight was read"))
    monkeypatch.setattr(load_decoder, "LlamaDecoder", lambda *_: pytest.fail("model built"))
    folder = llama_folder(tiny_llama_dir, tmp_path, num_hidden_layers=1_000_000)
    bert = bert_copy(tiny_dir, tmp_path, num_hidden_layers=1_000_000)
    for model, layers in ((folder, "model.layers.3.self_attn"), (bert, "encoder.layer.2.")):
        start = time.perf_counter()
        with pytest.raises(ValueError) as error:
            load(model)
        assert time.perf_counter() - start < 5
        message = str(error.value)
        assert f"tensor '{layers}" in message and "num_hidden_layers=1000000" in message
        assert "but the file holds" in message


def test_sizes_the_file_holds_but_the_machine_cannot_are_refused_with_the_estimate(
    tmp_path, monkeypatch
):
    from headlab import limits

    monkeypatch.setattr(limits, "machine_memory", lambda: 100_000)  # 100 kB of memory
    path = write_llama_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(ValueError, match=r"tiny\.gguf: loading [\d,]+ parameters.*needs about"):
        load(path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_layer": 1_000_000}, "declares num_hidden_layers=1000000, but its weights"),
        ({"vocab_size": 5000}, "parameters, but its weights hold"),
    ],
)
def test_the_transformers_route_checks_what_the_weights_hold(
    hf_dirs, tmp_path, monkeypatch, changes, message
):
    """The transformers route built a million declared layers on the meta device (minutes,
    gigabytes) before reading a weight; now the config is checked against the headers."""
    from headlab.models.hf import loader

    folder = edited_copy(hf_dirs["gpt2"], tmp_path / "gpt2", **changes)
    if "n_layer" in changes:  # refused before the meta build
        monkeypatch.setattr(loader, "plan_model", lambda *_: pytest.fail("built on meta"))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        load(folder, backend="transformers")
    assert time.perf_counter() - start < 10


def test_a_config_transformers_refuses_is_one_line(hf_dirs, tmp_path):
    """transformers validates some configs itself (huggingface_hub's strict dataclasses), with
    an error that is not a ValueError: it used to escape as a traceback."""
    folder = edited_copy(hf_dirs["qwen3"], tmp_path / "qwen3", num_hidden_layers=7)
    with pytest.raises(ValueError, match=r"qwen3: transformers cannot read its config \(.*7"):
        load(folder, backend="transformers")

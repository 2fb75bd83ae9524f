"""Malformed model files through the production route: one line (ValueError or
FileNotFoundError) naming the file, before any weight is read or any model built, and exit 2 with
that line in the CLI; a config declaring a million layers is refused from what its file holds.

The same malformed files the hand-built readers refused (a GGUF's metadata, a Llama folder's
config.json, a BERT folder's) now go through transformers' readers and headlab's checks before
the build (``models/hf/loader.py``); the exact wording is theirs, so these tests pin what is
promised: one line, the file named, no weight read, nothing built."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from gguf_files import HEADS, KV_HEADS, TOKENS, write_llama_gguf
from tokenizers import Tokenizer, models

from cli_run import run
from headlab.models import load
from model_files import edited_copy


def test_a_written_gguf_gives_transformers_logits(tmp_path):
    """The baseline of the malformed files below loads, and agrees with transformers' own GGUF
    reader run alone (eager attention)."""
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


def refused_in_one_line(source: Path, capsys, before_weights: bool = True) -> str:
    """The one-line refusal of ``source`` (library and CLI alike), naming it; with
    ``before_weights``, before transformers reads any weight."""
    from headlab.models.hf import loader

    with pytest.MonkeyPatch.context() as patch:
        if before_weights:
            patch.setattr(loader, "quiet_loading", lambda: pytest.fail("weights were read"))
        with pytest.raises((ValueError, FileNotFoundError)) as error:
            load(source)
    message = str(error.value)
    assert "\n" not in message and source.stem in message, message
    code, _, err = run(["model", "generate", "abc", "--model", str(source)], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return message


@pytest.mark.parametrize(
    ("metadata", "tensors", "before_weights"),
    [
        ({"llama.attention.head_count": 0}, {}, True),
        ({"llama.attention.head_count": "six"}, {}, True),
        ({"llama.attention.head_count": [4, 4]}, {}, True),
        ({"llama.attention.head_count": 5}, {}, True),
        # sizes that fit the metadata but not the tensors: refused in one line while reading
        # (transformers' GGUF progress bar and its "above report" silenced)
        ({"llama.attention.head_count": 3, "llama.attention.head_count_kv": 1}, {}, False),
        ({}, {"blk.1.ffn_up.weight": None}, True),
    ],
    ids=[
        "zero heads",
        "heads a string",
        "heads a list",
        "heads not dividing",
        "kv not fitting",
        "tensor missing",
    ],
)
def test_a_malformed_gguf_is_refused_in_one_line(
    tmp_path, capsys, metadata, tensors, before_weights
):
    path = write_llama_gguf(tmp_path / "bad.gguf", metadata, tensors)
    refused_in_one_line(path, capsys, before_weights)


def llama_folder(tiny_llama_dir: Path, tmp_path: Path, **changes) -> Path:
    return edited_copy(tiny_llama_dir, tmp_path / "llama", **changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"num_attention_heads": 0},
        {"num_attention_heads": [6]},
        {"num_attention_heads": "six"},
        {"num_key_value_heads": 0},
        {"rope_scaling": "linear"},
        {"rms_norm_eps": "tiny"},
        {"tie_word_embeddings": "no"},
        {"intermediate_size": 44},
    ],
    ids=str,
)
def test_a_malformed_llama_config_is_refused_in_one_line(tiny_llama_dir, tmp_path, capsys, changes):
    refused_in_one_line(llama_folder(tiny_llama_dir, tmp_path, **changes), capsys)


def bert_copy(tiny_dir: Path, tmp_path: Path, **changes) -> Path:
    return edited_copy(tiny_dir, tmp_path / "bert", **changes)


@pytest.mark.parametrize(
    "changes",
    [{"num_attention_heads": [3]}, {"num_attention_heads": 4}, {"hidden_size": 16}],
    ids=str,
)
def test_a_malformed_bert_config_is_refused_in_one_line(tiny_dir, tmp_path, capsys, changes):
    refused_in_one_line(bert_copy(tiny_dir, tmp_path, **changes), capsys)


@pytest.mark.parametrize("where", ["cli", "library"])
def test_a_gguf_declaring_a_million_layers_is_refused_at_once(tmp_path, monkeypatch, capsys, where):
    """A small file that declares a million layers: refused from the tensors it holds, in well
    under a few seconds, before the model is built or any tensor read."""
    from headlab.models.hf import loader

    path = write_llama_gguf(tmp_path / "deep.gguf", {"llama.block_count": 1_000_000})
    assert path.stat().st_size < 64_000
    monkeypatch.setattr(loader, "plan_model", lambda *_: pytest.fail("built on meta"))
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
    assert "deep" in message and "num_hidden_layers=1000000" in message


def test_a_config_declaring_a_million_layers_is_refused_at_once(
    tiny_llama_dir, tiny_dir, tmp_path, monkeypatch
):
    from headlab.models.hf import loader

    monkeypatch.setattr(loader, "plan_model", lambda *_: pytest.fail("built on meta"))
    folder = llama_folder(tiny_llama_dir, tmp_path, num_hidden_layers=1_000_000)
    bert = bert_copy(tiny_dir, tmp_path, num_hidden_layers=1_000_000)
    for model in (folder, bert):
        start = time.perf_counter()
        with pytest.raises(ValueError) as error:
            load(model)
        assert time.perf_counter() - start < 5
        assert "num_hidden_layers=1000000" in str(error.value) and model.name in str(error.value)


def test_sizes_the_file_holds_but_the_machine_cannot_are_refused_with_the_estimate(
    tmp_path, monkeypatch
):
    from headlab import limits

    monkeypatch.setattr(limits, "machine_memory", lambda: 10_000)  # 10 kB of memory
    path = write_llama_gguf(tmp_path / "tiny.gguf")  # 7,152 parameters: 28 kB in float32
    with pytest.raises(ValueError, match=r"^tiny \(7,152 parameters in float32\).*needs about"):
        load(path)


def test_a_tokenizer_beyond_the_vocabulary_is_refused(tiny_llama_dir, tmp_path):
    folder = llama_folder(tiny_llama_dir, tmp_path)
    vocab = {f"t{i}": i for i in range(97)} | {"big": 500}
    Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0")).save(str(folder / "tokenizer.json"))
    with pytest.raises(
        ValueError,
        match=r"^llama: its tokenizer's ids go up to 500, beyond the model's vocabulary "
        r"\(vocab_size=97: ids 0 to 96\)",
    ):
        load(folder)


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
        load(folder)
    assert time.perf_counter() - start < 10


def test_a_config_transformers_refuses_is_one_line(hf_dirs, tmp_path):
    """transformers validates some configs itself (huggingface_hub's strict dataclasses), with
    an error that is not a ValueError: it used to escape as a traceback."""
    folder = edited_copy(hf_dirs["qwen3"], tmp_path / "qwen3", num_hidden_layers=7)
    with pytest.raises(ValueError, match=r"qwen3: transformers cannot read its config \(.*7"):
        load(folder)


def test_a_gguf_whose_tensors_do_not_fit_says_so_without_the_missing_report(tmp_path, capsys):
    path = write_llama_gguf(
        tmp_path / "bad.gguf",
        {"llama.attention.head_count": 3, "llama.attention.head_count_kv": 1},
        {},
    )
    message = refused_in_one_line(path, capsys, before_weights=False)
    assert "shapes do not fit" in message and "above report" not in message, message

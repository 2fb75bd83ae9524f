"""Llama-family folders (Llama, Mistral, Qwen2) written by transformers: same logits through the
production route; bad files give one clear error naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models

from headlab.models import load

VOCAB = 97


def write_tokenizer(folder: Path) -> None:
    vocab = {f"t{i}": i for i in range(VOCAB)}
    Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0")).save(str(folder / "tokenizer.json"))


def tiny_folder(tmp_path: Path, family: str, **sizes) -> tuple[Path, torch.nn.Module]:
    import transformers

    config_class = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
    }[family]
    model_class = {
        "llama": transformers.LlamaForCausalLM,
        "mistral": transformers.MistralForCausalLM,
        "qwen2": transformers.Qwen2ForCausalLM,
    }[family]
    base = {
        "vocab_size": VOCAB,
        "hidden_size": 60,  # 6 heads of 10 on 2 K/V heads (distinct sizes: a swapped axis fails)
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "intermediate_size": 43,
        "num_hidden_layers": 3,
        "max_position_embeddings": 64,
        "rope_theta": 500.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    }
    if family == "mistral":
        base["sliding_window"] = None
    config = config_class(**{**base, **sizes})
    torch.manual_seed(7)
    model = model_class(config).eval()
    with torch.no_grad():  # biases (Qwen2) and norms away from their init, so that they matter
        for name, p in model.named_parameters():
            if "bias" in name or "norm" in name:
                p.normal_(0.5, 0.2)
    folder = tmp_path / family
    model.save_pretrained(folder, safe_serialization=True)
    write_tokenizer(folder)
    return folder, model


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_folder_logits_equal_transformers(tmp_path, family):
    folder, reference = tiny_folder(tmp_path, family)
    ours = load(folder)
    assert ours.heads_per_layer == [6, 6, 6] and ours.kv_heads_per_layer == [2, 2, 2]
    ids = torch.randint(0, VOCAB, (2, 23), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(ids).logits
    torch.testing.assert_close(ours.logits(ids), expected, atol=1e-5, rtol=1e-5)


def test_tied_embeddings_folder(tmp_path):
    folder, reference = tiny_folder(tmp_path, "llama", tie_word_embeddings=True)
    ids = torch.arange(19)[None] % VOCAB
    with torch.no_grad():
        expected = reference(ids).logits
    torch.testing.assert_close(load(folder).logits(ids), expected, atol=1e-5, rtol=1e-5)


def test_a_pickle_only_folder_is_refused(tmp_path):
    folder, _ = tiny_folder(tmp_path, "llama")
    for f in folder.glob("*.safetensors"):
        f.unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ValueError, match=r"no \*\.safetensors weights.*pytorch_model\.bin: pickle"):
        load(folder)


def test_heads_that_do_not_divide_name_the_config(tmp_path):
    folder, _ = tiny_folder(tmp_path, "llama")
    config = json.loads((folder / "config.json").read_text())
    config["num_key_value_heads"] = 4
    (folder / "config.json").write_text(json.dumps(config))
    # the route's refusal before the build (heads of the config against the weights it holds)
    with pytest.raises(ValueError, match=r"^llama: .*(num_key_value_heads|its config makes)"):
        load(folder)


def test_a_truncated_gguf_names_the_file(tmp_path):
    from headlab.models.packaged import packaged_smollm2

    cut = tmp_path / "cut.gguf"
    with packaged_smollm2().open("rb") as f:
        cut.write_bytes(f.read(2_000_000))
    with pytest.raises(ValueError, match=r"cut(\.gguf)?: transformers cannot read its"):
        load(cut)


def test_a_gguf_of_another_architecture_names_the_file(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 3), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    # transformers reads a GPT-2 GGUF: the one tensor written cannot hold the model
    with pytest.raises(ValueError, match=r"^gpt2: its config makes [\d,]+ parameters, but its"):
        load(path)


def test_unknown_names_are_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="model must be one of minilm, smollm2"):
        load("gpt-5")
    folder = tmp_path / "copy"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match=r"config\.json is missing"):
        load(folder)
    shutil.rmtree(folder)


def test_the_chat_prompt_is_the_tokenizers_template_or_the_text_itself(tiny_llama, tmp_path):
    assert tiny_llama.chat_prompt("hi") == "hi"  # its folder has no chat template
    folder = Path(shutil.copytree(tiny_llama.model.config._name_or_path, tmp_path / "chat"))
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    (folder / "chat_template.jinja").write_text(template)
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    prompt = load(folder).chat_prompt("hi")
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

"""Loading BERT folders through the production route: the tiny random BERT, and one clear error
per broken directory (tests/models/test_malformed_models.py checks the CLI's exit 2 and the
refusal before any weight is read)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from headlab.models import load


def test_tiny_loads_with_its_heads_and_pooling(tiny):
    assert tiny.family == "bert" and not tiny.causal
    assert tiny.num_layers == 2 and tiny.heads_per_layer == [3, 3]
    assert tiny.pooling.mode == "mean" and tiny.pooling.normalize
    assert tiny.pooling.max_seq_length == 37  # no sentence_bert_config.json: the positions


def test_query_key_and_output_weights_are_the_files(tiny_dir, tiny):
    tensors = load_file(str(tiny_dir / "model.safetensors"))
    w_q, w_k = tiny.attention_layers()[1].query_key_weights()
    p = "encoder.layer.1.attention."
    torch.testing.assert_close(w_q, tensors[p + "self.query.weight"], rtol=0, atol=0)
    torch.testing.assert_close(w_k, tensors[p + "self.key.weight"], rtol=0, atol=0)
    out = tiny.attention_layers()[1].output_weight()
    torch.testing.assert_close(out, tensors[p + "output.dense.weight"], rtol=0, atol=0)


@pytest.fixture
def broken(tiny_dir, tmp_path):
    target = tmp_path / "broken"
    shutil.copytree(tiny_dir, target)
    return target


def test_missing_config_is_named(broken):
    (broken / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=rf"{broken}: config\.json is missing"):
        load(broken)


def test_missing_weights_are_named(broken):
    (broken / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"broken: no \*\.safetensors weights"):
        load(broken)


def test_a_folder_without_a_tokenizer_says_so_when_text_comes(broken):
    (broken / "tokenizer.json").unlink()
    model = load(broken)
    with pytest.raises(ValueError, match=r"holds no tokenizer\.json"):
        model.tokenize(["a text"])


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load(tmp_path / "nowhere")


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hidden_size": "15"}, r"config\.json: hidden_size must be an integer >= 1, got '15'"),
        ({"num_attention_heads": 4}, "hidden size .15. is not a multiple of the number of"),
        ({"intermediate_size": 29}, "its config makes 462,553 parameters, but its weights hold"),
    ],
)
def test_a_config_the_weights_do_not_fit_is_named(broken, changes, message):
    _edit_config(broken, **changes)
    with pytest.raises(ValueError, match=message):
        load(broken)


def test_invalid_json(broken):
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json: not valid JSON"):
        load(broken)


def test_missing_tensor_is_refused_from_what_the_file_holds(broken):
    tensors = load_file(str(broken / "model.safetensors"))
    del tensors["encoder.layer.1.attention.self.key.bias"]
    save_file(tensors, str(broken / "model.safetensors"))
    with pytest.raises(ValueError, match="weights hold 462,166 values in 38 tensors"):
        load(broken)


def test_garbage_safetensors(broken):
    (broken / "model.safetensors").write_bytes(b"\x00" * 5)
    with pytest.raises(ValueError, match=r"model\.safetensors: not a readable safetensors file"):
        load(broken)


def test_garbage_tokenizer(broken):
    (broken / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=r"tokenizer\.json: not a readable tokenizer"):
        load(broken)


def test_bert_prefix_is_accepted(broken, tiny):
    tensors = load_file(str(broken / "model.safetensors"))
    save_file({f"bert.{k}": v for k, v in tensors.items()}, str(broken / "model.safetensors"))
    batch = tiny.tokenize(["prefixed tensor names load the same weights"])
    with torch.no_grad():
        torch.testing.assert_close(load(broken).run(batch), tiny.run(batch), rtol=0, atol=0)

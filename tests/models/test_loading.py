"""Loading BERT folders into the hand-built reference encoder: the tiny random BERT, and one
clear error per broken directory."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from headlab.attention import MultiHeadAttention
from headlab.models import load_encoder


@pytest.fixture
def tiny(tiny_reference):
    """Here ``tiny`` is the hand-built reference encoder (tests/conftest.py's tiny_reference)."""
    return tiny_reference


def test_tiny_loads_with_headlab_attention(tiny):
    assert tiny.num_layers == 2 and tiny.num_heads == 3 and tiny.d_model == 15
    assert tiny.heads_per_layer == [3, 3]
    for layer in tiny.model.layers:
        assert isinstance(layer.attention, MultiHeadAttention)
        assert layer.attention.batch_first
    assert tiny.pooling.mode == "mean" and tiny.pooling.normalize


def test_packed_projection_is_query_key_value_in_order(tiny_dir, tiny):
    tensors = load_file(str(tiny_dir / "model.safetensors"))
    w_q, w_k, w_v = tiny.model.layers[1].attention.projection_weights()
    p = "encoder.layer.1.attention."
    torch.testing.assert_close(w_q, tensors[p + "self.query.weight"], rtol=0, atol=0)
    torch.testing.assert_close(w_k, tensors[p + "self.key.weight"], rtol=0, atol=0)
    torch.testing.assert_close(w_v, tensors[p + "self.value.weight"], rtol=0, atol=0)
    out = tiny.model.layers[1].attention.out_proj.weight
    torch.testing.assert_close(out, tensors[p + "output.dense.weight"], rtol=0, atol=0)


@pytest.fixture
def broken(tiny_dir, tmp_path):
    target = tmp_path / "broken"
    shutil.copytree(tiny_dir, target)
    return target


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json"])
def test_missing_file_is_named(broken, name):
    (broken / name).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{broken}.*{name} is missing"):
        load_encoder(broken)


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_encoder(tmp_path / "nowhere")


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": "gpt2"}, "model_type must be 'bert'.*got 'gpt2'"),
        ({"num_attention_heads": 4}, "hidden_size=15 is not divisible by num_attention_heads=4"),
        ({"hidden_act": "swish"}, "hidden_act must be one of"),
        ({"hidden_size": "15"}, "'hidden_size' must be int"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type must be"),
    ],
)
def test_non_bert_config_is_named(broken, changes, message):
    _edit_config(broken, **changes)
    with pytest.raises(ValueError, match=rf"config\.json: {message}"):
        load_encoder(broken)


def test_invalid_json(broken):
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json: not valid JSON"):
        load_encoder(broken)


def test_wrong_shape_names_tensor_and_shapes(broken):
    _edit_config(broken, intermediate_size=29)
    with pytest.raises(
        ValueError,
        match=r"model\.safetensors: tensor 'encoder\.layer\.0\.intermediate\.dense\.weight' has "
        r"shape \(23, 15\), config\.json says \(29, 15\)",
    ):
        load_encoder(broken)


def test_missing_tensor_is_named(broken):
    tensors = load_file(str(broken / "model.safetensors"))
    del tensors["encoder.layer.1.attention.self.key.bias"]
    save_file(tensors, str(broken / "model.safetensors"))
    with pytest.raises(ValueError, match=r"tensor 'encoder\.layer\.1\.attention\.self\.key\.bias'"):
        load_encoder(broken)


def test_garbage_safetensors(broken):
    (broken / "model.safetensors").write_bytes(b"\x00" * 5)
    with pytest.raises(ValueError, match=r"model\.safetensors: not a readable safetensors file"):
        load_encoder(broken)


def test_garbage_tokenizer(broken):
    (broken / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=r"tokenizer\.json: not a readable tokenizer"):
        load_encoder(broken)


def test_bert_prefix_is_accepted(broken, tiny):
    tensors = load_file(str(broken / "model.safetensors"))
    save_file({f"bert.{k}": v for k, v in tensors.items()}, str(broken / "model.safetensors"))
    texts = ["prefixed tensor names load the same weights"]
    torch.testing.assert_close(load_encoder(broken).embed(texts), tiny.embed(texts))

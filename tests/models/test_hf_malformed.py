"""Malformed checkpoints on the transformers route: one line naming the file and the field (exit
2 on the command line), before transformers builds the model or reads a weight; weights that
disagree with the config refused from their headers; NaN weights named at load; tensors the
model does not use said in one line instead of transformers' LOAD REPORT table."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from hf_families import write_family
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from cli_run import run
from headlab.models import load
from headlab.models.hf import load_transformers
from headlab.models.hf.config_fields import EPSILONS, SIZES, check_config_fields
from headlab.notices import HeadlabWarning
from model_files import edited_copy


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> Path:
    """A tiny Qwen3 (a family only the transformers route runs): 2 layers, vocab 101."""
    return write_family("qwen3", tmp_path_factory.mktemp("malformed") / "qwen3")


@pytest.fixture
def no_weight_read(monkeypatch):
    """Fails the test if transformers starts loading weights (or building the real model)."""
    import transformers

    def refuse(*args, **kwargs):
        pytest.fail("transformers' from_pretrained was called")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))


def _one_line(error: BaseException) -> str:
    text = str(error.value) if hasattr(error, "value") else str(error)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"num_attention_heads": 0},
            "config.json: num_attention_heads must be an integer >= 1, got 0",
        ),
        (
            {"num_attention_heads": -6},
            "config.json: num_attention_heads must be an integer >= 1, got -6",
        ),
        ({"num_key_value_heads": 2.5}, "config.json: num_key_value_heads must be an integer >= 1"),
        ({"hidden_size": True}, "config.json: hidden_size must be an integer >= 1, got True"),
        (
            {"dtype": "float128"},
            "config.json: dtype must be one of bfloat16, float16, float32, float64, got 'float128'",
        ),
        ({"torch_dtype": 32}, "config.json: torch_dtype must be one of"),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": "big", "rope_theta": 1e4}},
            "config.json: rope_parameters.factor must be a finite number, got 'big'",
        ),
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": -1.0}},
            "config.json: rope_parameters.rope_theta must be > 0, got -1.0",
        ),
        ({"rope_parameters": "linear"}, "config.json: rope_parameters must be a JSON object"),
        (  # the weights' embedding has 101 rows
            {"vocab_size": 50},
            "qwen3: tensor 'model.embed_tokens.weight' has shape (101, 48) in its weights, but "
            "config.json makes it (50, 48) (vocab_size=50)",
        ),
        (  # the weights hold 2 layers
            {"num_hidden_layers": 1, "layer_types": ["full_attention"]},
            "qwen3: its weights hold 11 tensors beyond what config.json declares (e.g. "
            "'model.layers.1.",
        ),
    ],
)
def test_a_malformed_config_is_one_line_naming_the_file_and_the_field(
    qwen3_dir, tmp_path, no_weight_read, changes, message
):
    folder = edited_copy(qwen3_dir, tmp_path / "qwen3", **changes)
    with pytest.raises(ValueError) as error:
        load(folder)
    text = _one_line(error)
    assert text.startswith(str(folder)) and message in text, text
    if "num_hidden_layers" in changes:
        assert "config.json declares num_hidden_layers=1" in text


@pytest.mark.parametrize(
    "changes",
    [{"num_attention_heads": 0}, {"dtype": "float128"}, {"vocab_size": 50}],
)
def test_the_command_line_exits_2_with_one_line(qwen3_dir, tmp_path, capsys, changes):
    folder = edited_copy(qwen3_dir, tmp_path / "qwen3", **changes)
    code, out, err = run(["model", "generate", "w1 w2", "--model", str(folder)], capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("headlab: error: ") and str(folder) in err, err


def _edited_weights(source: Path, folder: Path, edit) -> Path:
    shutil.copytree(source, folder)
    tensors = load_file(folder / "model.safetensors")
    edit(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_a_nan_weight_is_named_at_load(qwen3_dir, tmp_path):
    def poison(tensors):
        tensors["model.layers.1.mlp.up_proj.weight"][3, 4] = float("nan")
        tensors["model.layers.1.mlp.up_proj.weight"][5, 1] = float("inf")

    folder = _edited_weights(qwen3_dir, tmp_path / "qwen3", poison)
    with pytest.raises(ValueError) as error:
        load(folder)
    assert _one_line(error) == (
        f"{folder}: tensor 'model.layers.1.mlp.up_proj.weight' holds 2 NaN or infinite values; "
        "expected finite weights"
    )


def test_extra_tensors_are_one_warning_not_transformers_table(qwen3_dir, tmp_path, capsys):
    def extend(tensors):
        tensors["model.probe_head.weight"] = torch.ones(3, 5)
        tensors["model.probe_head.bias"] = torch.ones(3)

    folder = _edited_weights(qwen3_dir, tmp_path / "qwen3", extend)
    with pytest.warns(HeadlabWarning) as caught:
        model = load(folder)
    assert model.num_layers == 2
    assert [str(w.message) for w in caught] == [
        "qwen3: 2 tensors of its weights unused (e.g. 'model.probe_head.bias')"
    ]
    argv = ["model", "generate", "w1 w2", "--model", str(folder), "--max-new-tokens", "2"]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    assert "LOAD REPORT" not in err and "UNEXPECTED" not in err
    warnings = [line for line in err.splitlines() if "unused" in line]
    assert warnings == [
        "headlab: warning: qwen3: 2 tensors of its weights unused (e.g. 'model.probe_head.bias')"
    ]


@pytest.mark.parametrize("keep", [10, 100, 1000, 0.5])
def test_a_cut_gguf_is_one_line(tmp_path, keep):
    """A GGUF file cut short anywhere (in its header, its metadata, its tensor table or its
    data): one line naming the file, not transformers' struct.error."""
    from gguf_files import write_llama_gguf

    full = write_llama_gguf(tmp_path / "full.gguf").read_bytes()
    size = int(len(full) * keep) if isinstance(keep, float) else keep
    path = tmp_path / "cut" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(full[:size])
    with pytest.raises(ValueError) as error:
        load_transformers(path)
    text = _one_line(error)
    assert text.startswith(f"{path}: ")
    assert "not a readable GGUF file (cut short" in text or "cannot read its metadata" in text


def test_config_json_stays_as_written(qwen3_dir):
    """The baseline: the unedited folder loads without a warning (filterwarnings=error)."""
    config = json.loads((qwen3_dir / "config.json").read_text())
    assert load(qwen3_dir).num_layers == config["num_hidden_layers"] == 2


_VALUES = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)


@given(field=st.sampled_from(SIZES), value=_VALUES, nested=st.booleans())
def test_a_size_field_is_refused_exactly_when_it_is_not_a_positive_integer(field, value, nested):
    """Property: check_config_fields refuses a size, naming it (with text_config. when nested),
    if and only if it is present and not an integer >= 1 (bool is not an integer here)."""
    config = {"model_type": "llama", field: value}
    if nested:
        config = {"model_type": "llava", "text_config": config}
    valid = value is None or (type(value) is int and value >= 1)
    if valid:
        check_config_fields(config, "c/config.json")
        return
    name = f"text_config.{field}" if nested else field
    with pytest.raises(ValueError, match=rf"^c/config\.json: {name} must be an integer >= 1, "):
        check_config_fields(config, "c/config.json")


@given(theta=_VALUES, factor=_VALUES, per_layer=st.booleans())
def test_rotary_numbers_are_refused_exactly_when_not_finite_positive_numbers(
    theta, factor, per_layer
):
    rope = {"rope_type": "linear", "rope_theta": theta, "factor": factor}
    config = {"rope_parameters": {"full_attention": rope} if per_layer else rope}

    def good(v):
        return v is None or (type(v) in (int, float) and math.isfinite(v) and v > 0)

    if good(theta) and good(factor):
        check_config_fields(config, "config.json")
        return
    with pytest.raises(ValueError, match=r"^config\.json: rope_parameters\.(full_attention\.)?"):
        check_config_fields(config, "config.json")


def test_transformers_loading_report_in_one_warning_line():
    """What transformers' table held (unused tensors, parameters initialised at random) as one
    line; nothing when it held nothing."""
    import warnings

    from headlab.models.hf.weights_match import say_unused

    info = {
        "unexpected_keys": {"b.extra", "a.extra"},
        "missing_keys": {"model.norm.weight"},
        "mismatched_keys": set(),
    }
    with pytest.warns(HeadlabWarning) as caught:
        say_unused(info, "m")
    assert [str(w.message) for w in caught] == [
        "m: 2 tensors of its weights unused (e.g. 'a.extra'); 1 parameter missing from its "
        "weights, initialised at random (e.g. 'model.norm.weight')"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        say_unused({"unexpected_keys": set(), "missing_keys": set()}, "m")


@given(
    value=st.one_of(_VALUES, st.integers(-60, 60)), vocab=st.integers(1, 50), nested=st.booleans()
)
def test_pad_token_id_is_refused_exactly_where_torch_refuses_it_as_padding_idx(
    value, vocab, nested
):
    """Property: a pad_token_id is refused, naming it, exactly where torch's nn.Embedding (the
    reference: transformers passes it as ``padding_idx``) refuses it or it is not an integer."""
    config = {"model_type": "llama", "vocab_size": vocab, "pad_token_id": value}
    if nested:
        config = {"model_type": "llava", "text_config": config}
    torch_takes = type(value) is int
    if torch_takes:
        try:
            torch.nn.Embedding(vocab, 2, padding_idx=value)
        except AssertionError:
            torch_takes = False
    if value is None or torch_takes:
        check_config_fields(config, "c/config.json")
        return
    name = "text_config.pad_token_id" if nested else "pad_token_id"
    with pytest.raises(ValueError, match=rf"^c/config\.json: {name} must be a token id"):
        check_config_fields(config, "c/config.json")


@given(field=st.sampled_from(EPSILONS), value=_VALUES)
def test_a_norm_epsilon_is_refused_exactly_when_not_a_finite_number_from_zero(field, value):
    config = {"model_type": "bert", field: value}
    good = value is None or (type(value) in (int, float) and math.isfinite(value) and value >= 0)
    if good:
        check_config_fields(config, "config.json")
        return
    with pytest.raises(ValueError, match=rf"^config\.json: {field} must be a finite number >= 0"):
        check_config_fields(config, "config.json")


def test_relative_positions_the_family_no_longer_runs_are_refused(
    qwen3_dir, tmp_path, no_weight_read
):
    """transformers 5's BERT does not read ``position_embedding_type`` (its own model gives the
    same output with 'relative_key' as with absolute positions, shown first): a checkpoint that
    asks for relative positions is refused before the build, not run as another model."""
    import transformers

    small = dict(
        vocab_size=31,
        hidden_size=14,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=17,
        max_position_embeddings=19,
    )
    torch.manual_seed(0)
    absolute = transformers.BertModel(transformers.BertConfig(**small)).eval()
    relative_config = transformers.BertConfig(**small, position_embedding_type="relative_key")
    relative = transformers.BertModel(relative_config).eval()
    relative.load_state_dict(absolute.state_dict())
    ids = torch.tensor([[1, 5, 7, 3, 2]])
    with torch.no_grad():
        same = torch.equal(absolute(ids).last_hidden_state, relative(ids).last_hidden_state)
    assert same, "this transformers runs relative_key: the refusal is no longer needed"
    config = {**relative_config.to_dict(), "model_type": "bert"}
    with pytest.raises(ValueError, match=r"config\.json: position_embedding_type 'relative_key'"):
        check_config_fields(config, "config.json")
    check_config_fields({**config, "position_embedding_type": "absolute"}, "config.json")
    folder = edited_copy(qwen3_dir, tmp_path / "qwen3", position_embedding_type="relative_key")
    with pytest.raises(ValueError) as error:  # before transformers reads a weight
        load(folder)
    assert "position_embedding_type 'relative_key'" in _one_line(error)
    # ESM's code does read the field: its rotary positions are not refused.
    check_config_fields({"model_type": "esm", "position_embedding_type": "rotary"}, "c.json")

"""The transformers route's refusals, each from an empty folder: remote code only with exactly
``trust_remote_code=True``; a family without text (a vision model) refused in one line, by
``load`` and by ``attach``, and a failed ``attach`` leaves the user's model as it was."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from headlab.models import load
from headlab.models.hf import load_transformers


def _remote_code_folder(tmp_path: Path) -> tuple[Path, Path]:
    """(a folder whose config names its own Python code in auto_map, the file that code writes
    when it runs)."""
    marker = tmp_path / "the checkpoint's code ran"
    folder = tmp_path / "evil"
    folder.mkdir()
    auto_map = {
        "AutoConfig": "modeling_evil.EvilConfig",
        "AutoModel": "modeling_evil.EvilModel",
        "AutoModelForCausalLM": "modeling_evil.EvilModel",
    }
    config = {"model_type": "evil", "auto_map": auto_map, "architectures": ["EvilModel"]}
    (folder / "config.json").write_text(json.dumps(config))
    code = f"open({str(marker)!r}, 'w').write('ran')\n"
    for name in ("modeling_evil.py", "configuration_evil.py"):
        (folder / name).write_text(code)
    return folder, marker


@pytest.mark.parametrize("value", ["no", "False", 1, 0, None, [True]])
@pytest.mark.parametrize("entry", [load, load_transformers])
def test_only_true_runs_remote_code_anything_else_but_false_is_a_type_error(entry, value, tmp_path):
    folder, marker = _remote_code_folder(tmp_path)
    expected = "trust_remote_code must be True or False, got " + re.escape(repr(value))
    with pytest.raises(TypeError, match=expected):
        entry(folder, trust_remote_code=value)
    assert not marker.exists()
    with pytest.raises(ValueError, match=r"own Python code \(auto_map\).*trust_remote_code=True"):
        entry(folder, trust_remote_code=False)
    assert not marker.exists()
    if entry is load:  # also where no checkpoint code could run: the value itself is wrong
        with pytest.raises(TypeError, match=expected):
            load("minilm", trust_remote_code=value)


def _vit():
    import transformers

    config = transformers.ViTConfig(
        hidden_size=12,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=17,
        image_size=8,
        patch_size=4,
    )
    return transformers.ViTModel(config).eval()


def _state(model) -> tuple:
    """What attach may change: every config's attention implementation, training modes, and
    headlab's attributes on the modules."""
    from headlab.models.hf.restore import _configs

    return (
        [c._attn_implementation_internal for c in _configs(model)],
        [m.training for m in model.modules()],
        [
            sorted((k, id(v)) for k, v in m.__dict__.items() if k.startswith("headlab"))
            for m in model.modules()
        ],
    )


def test_a_vision_model_is_refused_in_one_line_by_load_and_attach(tmp_path, capsys):
    import headlab
    from cli_run import run

    model = _vit()
    model.save_pretrained(tmp_path / "vit")
    pattern = r"family 'vit' \(ViTModel\) reads pixel_values, not text; headlab runs language"
    with pytest.raises(ValueError, match="vit: " + pattern) as refused:
        load(tmp_path / "vit")
    assert "\n" not in str(refused.value)
    capsys.readouterr()  # save_pretrained's own progress bar
    code, out, err = run(["model", "generate", "hi", "--model", str(tmp_path / "vit")], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "reads pixel_values" in err, err
    before = _state(model)
    with pytest.raises(ValueError, match=pattern):
        headlab.attach(model)
    assert _state(model) == before
    assert model.config._attn_implementation == "sdpa"


class _BrokenTokenizer:
    """A tokenizer that fails when the adapter first asks it something (after the probe)."""

    def __call__(self, *args, **kwargs):
        raise RuntimeError("this tokenizer fails")


@pytest.mark.parametrize("where", ["set_attn_implementation", "probe", "tokenizer"])
def test_a_failed_attach_leaves_the_users_model_as_it_was(where, monkeypatch):
    """Failing while switching the attention, while observing the forward or after the layers
    are kept: the implementation ("eager" here), the training mode and the modules are as
    before, and the model still computes what it computed."""
    from hf_families import build, padded

    import headlab
    import headlab.models.hf.adapter as adapter

    model = build("llama")
    model.set_attn_implementation("eager")
    model.train()
    ids, mask = padded(3)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
    before = _state(model)
    tokenizer = None
    if where == "probe":

        def failing(model, family):
            model(input_ids=torch.tensor([[1, 2, 3]]))  # the forward runs, then the probe fails
            raise RuntimeError("the probe fails")

        monkeypatch.setattr(adapter, "probe", failing)
    elif where == "tokenizer":
        tokenizer = _BrokenTokenizer()
    else:
        monkeypatch.setattr(
            type(model), "set_attn_implementation", lambda self, name: _switch_then_fail(self)
        )
    with pytest.raises(RuntimeError, match="fails"):
        headlab.attach(model, tokenizer)
    assert _state(model) == before
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits, expected)


def _switch_then_fail(model):
    model.config._attn_implementation_internal = "headlab"
    raise RuntimeError("switching fails")


def test_a_second_attach_that_fails_keeps_the_first(monkeypatch):
    from hf_families import build

    import headlab
    import headlab.models.hf.adapter as adapter

    model = build("qwen3")
    first = headlab.attach(model)
    before = _state(model)
    monkeypatch.setattr(adapter, "model_layers", lambda model: None)  # probe again: new layers
    with pytest.raises(RuntimeError, match="fails"):
        headlab.attach(model, _BrokenTokenizer())
    assert _state(model) == before
    assert model.headlab_layers is first.layers


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("", "the model is an empty string; expected minilm, smollm2, a model folder"),
        ("  ", "the model is an empty string"),
        ("a" * 5000, "is 5,000 bytes long; a path holds at most 4,096 bytes and 255 in one name"),
        ("a/" * 2100, "is 4,200 bytes long"),
        ("x" * 256, "is 256 bytes long"),
    ],
)
def test_a_model_that_cannot_name_anything_is_one_line_and_exit_2(model, message, capsys):
    """Path("") is the current folder and a 5,000-character path an OSError ("File name too
    long", exit 1): both are bad input, refused before anything is read."""
    from cli_run import run
    from headlab.models.hf.checkpoint import locate

    for entry in (load, load_transformers, locate):
        with pytest.raises(ValueError, match=re.escape(message)):
            entry(model)
    code, out, err = run(["model", "generate", "hi", "--model", model], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert len(err) < 300  # the path is not echoed whole

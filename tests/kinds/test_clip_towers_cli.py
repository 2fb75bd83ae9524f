"""CLIP's two towers from one checkpoint: the text route loads the text tower alone (its states
equal transformers' eager ``CLIPTextModel`` read from the same folder), ``model heads`` and
``model ablate`` choose the tower with ``--tower``, and a tower that does not fit the model or
the inputs is one line and exit code 2 before the model loads."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch

from cli_run import run


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    """A random tiny CLIP (text tower: 3 layers x 4 heads; image tower: 2 x 2) with a word-level
    tokenizer, and a copy whose weights are unreadable (refusals come before any load)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path_factory.mktemp("clip") / "clip"
    torch.manual_seed(3)
    text = dict(
        vocab_size=97,
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=40,
        max_position_embeddings=32,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=0,
    )
    vision = dict(
        hidden_size=20,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=36,
        image_size=35,
        patch_size=7,
    )
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    transformers.CLIPModel(config).save_pretrained(folder, safe_serialization=True)
    tokenizer = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(97)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))
    broken = folder.parent / "clip_broken"
    shutil.copytree(folder, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    return folder


def test_the_text_route_loads_the_text_tower_equal_to_eager(clip_dir):
    import transformers

    from headlab.models import load

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the image tower's tensors are not "unused weights"
        model = load(clip_dir)
    eager = transformers.CLIPTextModel.from_pretrained(clip_dir, attn_implementation="eager")
    ids = torch.tensor([[5, 6, 7, 8, 9, 2]])
    with torch.no_grad():
        ours = model.model(input_ids=ids).last_hidden_state
        want = eager.eval()(input_ids=ids).last_hidden_state
    assert model.heads_per_layer == [4, 4, 4]
    assert float((ours - want).abs().max()) < 1e-5


def test_tower_text_runs_heads_on_the_texts(clip_dir, tmp_path, capsys):
    text = tmp_path / "a.txt"
    text.write_text("t5 t6 t7 t8 t9 t10 t11")
    out = tmp_path / "heads.json"
    code, _, err = run(
        [
            "model",
            "heads",
            "--model-dir",
            str(clip_dir),
            "--tower",
            "text",
            "--text-file",
            str(text),
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["num_layers"] == 3 and data["num_heads"] == 4


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], "holds a text and an image tower (clip): pass --tower text"),
        (["--tower", "vision"], "--tower vision reads images: pass --image"),
        (["--tower", "txt"], "--tower must be text or vision, got 'txt'"),
        (["--tower", "text", "--source-text", "t5"], "--tower text reads texts"),
    ],
)
def test_a_tower_that_does_not_fit_is_one_line_before_the_load(clip_dir, capsys, extra, expected):
    broken = str(clip_dir.parent / "clip_broken")
    for command in (["model", "heads"], ["model", "ablate", "--ablate", "1.2"]):
        code, out, err = run([*command, "--model-dir", broken, *extra], capsys)
        lines = [line for line in err.splitlines() if line.startswith("headlab: error")]
        assert code == 2 and out == "" and len(lines) == 1 and expected in lines[0], err


def test_tower_on_a_one_tower_model_is_refused(tmp_path, capsys):
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    code, _, err = run(["model", "heads", "--model-dir", str(folder), "--tower", "text"], capsys)
    assert code == 2 and "--tower is for models with a text and an image tower" in err

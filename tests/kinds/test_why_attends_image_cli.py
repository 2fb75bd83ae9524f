"""``headlab why-attends --image`` on an image model: bad input is one line and exit code 2 before
the model loads (folders whose weights are unreadable: a load would fail with another message),
and a run on a random tiny DINOv2 with registers writes the library's split, its table and a
figure (the source split on the patch grid)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from tiny_kinds import saved

from cli_run import run


def _two_towers(folder):
    """A tiny CLIP checkpoint (a text and an image tower) with an image processor and no
    tokenizer."""
    import torch
    import transformers as tf

    torch.manual_seed(2)
    tower = dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=4, intermediate_size=40)
    config = tf.CLIPConfig(
        text_config=dict(
            vocab_size=97,
            max_position_embeddings=32,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            **tower,
        ),
        vision_config=dict(image_size=35, patch_size=7, **tower),
        projection_dim=16,
    )
    tf.CLIPModel(config).save_pretrained(folder)
    tf.ViTImageProcessor(size={"height": 35, "width": 35}).save_pretrained(folder)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("why-attends-image")
    for kind in ("dinov2_registers", "vit", "t5"):
        (root / kind).mkdir()
        saved(kind, root / kind)
        broken = root / f"{kind}_broken"
        shutil.copytree(root / kind, broken)
        (broken / "model.safetensors").write_bytes(b"not weights")
    _two_towers(root / "clip")
    rng = np.random.default_rng(5)
    (root / "two").mkdir()
    for name in ("one.png", "two/a.png", "two/b.png"):
        pixels = rng.integers(0, 256, (41, 53, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / name)
    return root


HEAD = ["--layer", "1", "--head", "2"]
VIT = ["--model-dir", "{root}/vit_broken", *HEAD]
ONE = ["--image", "{root}/one.png"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([*VIT, *ONE, "--text", "a cat"], "--text: for text models"),
        ([*VIT, *ONE, "--source-text", "a cat"], "--source-text: for text models"),
        ([*VIT, *ONE, "--keys", "induction"], "is a text's pattern"),
        ([*VIT, *ONE, "--keys", "top-0"], "top-K needs K >= 1"),
        ([*VIT, *ONE, "--keys", "sink"], "--keys must be one of"),
        ([*VIT, *ONE, "--query", "corner"], "--query on an image takes"),
        ([*VIT, *ONE, "--keys", "registers"], "has no register tokens"),
        (["--model-dir", "{root}/vit_broken", "--layer", "3", "--head", "0", *ONE], "0..2"),
        (["--model-dir", "{root}/vit_broken", "--layer", "0", "--head", "4", *ONE], "0..3"),
        ([*VIT, "--image", "{root}/two"], "one image, got 2"),
        ([*VIT, "--image", "{root}/missing.png"], "missing.png"),
        ([*VIT], "is an image model: pass --image"),
        (["--model-dir", "{root}/t5_broken", *HEAD, *ONE], "(--image)"),
    ],
)
def test_bad_input_is_one_line_before_the_model_loads(folders, capsys, argv, expected):
    code, out, err = run(["why-attends", *[a.format(root=folders) for a in argv]], capsys)
    lines = [line for line in err.splitlines() if line.startswith("headlab: error")]
    assert code == 2 and out == "" and len(lines) == 1 and expected in lines[0], (code, err)
    assert "Traceback" not in err


def test_a_run_writes_the_library_split_and_a_figure(folders, capsys, tmp_path):
    from PIL import Image

    from headlab.circuits.image_keys import ImageKeys
    from headlab.cli.why_attends_image import split_image
    from headlab.models.hf.kinds_loader import load_vision
    from headlab.results.score_split_result import ScoreSplitResult

    out, figure = tmp_path / "why.json", tmp_path / "why.png"
    argv = ["why-attends", "--model-dir", str(folders / "dinov2_registers"), *HEAD]
    argv += ["--image", str(folders / "one.png"), "--query", "cls,patch-7", "--keys", "top-3"]
    code, stdout, err = run([*argv, "--out", str(out), "--figure", str(figure)], capsys)
    assert code == 0, err
    assert "1.2: query 0 'cls' -> key" in stdout and "patch-embed" in stdout
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    written = ScoreSplitResult.from_dict(json.loads(out.read_text()))
    assert written.grid == (5, 5) and written.first_patch == 5  # 35 pixels of 7, 4 registers
    assert [p.query for p in written.pairs] == [0, 0, 0, 12, 12, 12]
    model = load_vision(folders / "dinov2_registers")
    picture = Image.open(folders / "one.png")
    want = split_image(model, picture, 1, 2, "cls,patch-7", ImageKeys.parse("top-3"), 3, False)
    assert written.components[:4] == ["patch-embed", "cls-token", "register-tokens", "pos-embed"]
    for got, expected in zip(written.pairs, want.pairs, strict=True):
        assert (got.query, got.key) == (expected.query, expected.key)
        assert np.allclose(got.key_marginal, expected.key_marginal, rtol=1e-6, atol=1e-9)
        assert abs(sum(got.key_marginal) - got.score) <= 1e-5 * max(1.0, abs(got.score))


def test_a_two_tower_checkpoint_reads_images_with_its_vision_tower(folders, capsys, tmp_path):
    """CLIP: --image splits a head of its vision tower (its sizes read from vision_config
    before the load); without --image the text command reads its text tower, as every text
    command does (this folder has no tokenizer: that is what it says)."""
    clip = ["why-attends", "--model-dir", str(folders / "clip"), "--layer", "2"]
    out = ["--out", str(tmp_path / "why.json")]
    code, stdout, err = run(
        [*clip, "--head", "3", "--image", str(folders / "one.png"), *out], capsys
    )
    assert code == 0 and "2.3: query 0 'cls' -> key" in stdout, err
    code, _, err = run([*clip, "--head", "4", "--image", str(folders / "one.png"), *out], capsys)
    assert code == 2 and "--head must lie in 0..3" in err and "loading" not in err
    code, _, err = run([*clip, "--head", "0", *out, "--force"], capsys)
    assert code == 2 and "no tokenizer" in err and "is an image model" not in err

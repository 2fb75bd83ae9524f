"""``headlab circuits --image --corrupted-image`` on an image model: bad input is one line and exit
code 2 before the model loads (folders whose weights are unreadable: a load would fail with
another message), and a run writes the circuits results file with the library's scores (a ViT
with its classification head, loaded with it)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from tiny_kinds import saved

from cli_run import run


def _classifier(folder):
    import transformers as tf

    from headlab.models.hf.registry import register

    torch.manual_seed(7)
    config = tf.ViTConfig(
        hidden_size=21,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=37,
        image_size=35,
        patch_size=7,
        num_labels=11,
    )
    model = tf.ViTForImageClassification(config)
    model.set_attn_implementation(register())
    model.save_pretrained(folder, safe_serialization=True)
    tf.ViTImageProcessor(size={"height": 35, "width": 35}).save_pretrained(folder)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("image-circuits")
    (root / "vit").mkdir()
    _classifier(root / "vit")
    (root / "t5").mkdir()
    saved("t5", root / "t5")
    for kind in ("vit", "t5"):
        broken = root / f"{kind}_broken"
        shutil.copytree(root / kind, broken)
        (broken / "model.safetensors").write_bytes(b"not weights")
    rng = np.random.default_rng(3)
    for folder, count in (("clean", 2), ("corrupted", 2), ("one", 1)):
        (root / folder).mkdir()
        for i in range(count):
            pixels = rng.integers(0, 256, (41, 53, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / folder / f"{i}.png")
    return root


BROKEN = ["--model", "{root}/vit_broken"]
PAIR = ["--image", "{root}/clean", "--corrupted-image", "{root}/corrupted"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([*BROKEN, "--image", "{root}/clean"], "--image needs --corrupted-image"),
        ([*BROKEN, "--corrupted-image", "{root}/one"], "--corrupted-image needs --image"),
        (
            [*BROKEN, "--image", "{root}/clean", "--corrupted-image", "{root}/one"],
            "--corrupted-image: one per --image, got 1 for 2",
        ),
        (
            [*BROKEN, "--corrupted-image", "{root}/nothing.png", "--image", "{root}/clean"],
            "nothing.png",
        ),
        ([*BROKEN], "is an image model: pass --image"),
        ([*BROKEN, "--task", "ioi", *PAIR], "--task: for decoder-only models"),
        ([*BROKEN, "--source-text", "hi"], "reads images (--image)"),
        ([*BROKEN, *PAIR, "--source-text", "hi"], "are for image models; leave out the source"),
        ([*BROKEN, *PAIR, "--method", "composition"], "--method must be one of eap, path-patching"),
        (["--model", "{root}/t5_broken", *PAIR], "got images (--image)"),
    ],
)
def test_bad_input_is_one_line_before_the_model_loads(folders, capsys, argv, expected):
    code, out, err = run(["circuits", *[a.format(root=folders) for a in argv]], capsys)
    lines = [line for line in err.splitlines() if line.startswith("headlab: error")]
    assert code == 2 and out == "" and len(lines) == 1 and expected in lines[0], (code, err)
    assert "Traceback" not in err


def test_circuits_of_an_image_classifier_write_the_library_scores(folders, capsys, tmp_path):
    from PIL import Image

    from headlab.circuits.image_inputs import image_inputs
    from headlab.circuits.stream_patching import stream_path_patching
    from headlab.models.hf.kinds_loader import load_vision
    from headlab.results.circuit_run import CircuitRun

    out = tmp_path / "circuits.json"
    argv = ["circuits", "--model", str(folders / "vit"), *[a.format(root=folders) for a in PAIR]]
    figure = tmp_path / "circuit.png"
    argv += ["--method", "path-patching", "--top", "7", "--out", str(out), "--figure", str(figure)]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    assert "Top 7 of" in stdout and "clean-corrupted-image" in stdout
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    written = CircuitRun.from_dict(json.loads(out.read_text()))
    assert written.scores.metric == "logit_diff"
    assert written.cross_heads_per_layer is None  # one stream: drawn as a decoder's circuit
    model = load_vision(folders / "vit")
    assert model.has_head  # the classifier its config declares, loaded with its head

    def pixels(folder):
        return model.pixels([Image.open(folders / folder / f"{i}.png") for i in range(2)])

    inputs = image_inputs(model, pixels("clean"), pixels("corrupted"))
    want = stream_path_patching(model, inputs.clean, inputs.corrupted, inputs.metric)
    assert written.scores.edges == want.edges
    assert np.allclose(written.scores.scores, want.scores, rtol=1e-5, atol=1e-7)
    assert max(map(abs, want.scores)) > 0

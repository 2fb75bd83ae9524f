"""``model heads``, ``model ablate`` and ``model generate`` on encoder-decoders and image models:
the results files equal the library's results on the same inputs, and bad input is one line and
exit code 2 before the model loads (shown with folders whose weights are unreadable: a load
would fail with another message)."""

from __future__ import annotations

import json
import shutil
import wave

import numpy as np
import pytest
from tiny_kinds import saved

from cli_run import run


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("kinds")
    for kind in ("t5", "whisper", "dinov2_registers"):
        (root / kind).mkdir()
        saved(kind, root / kind)
        broken = root / f"{kind}_broken"
        shutil.copytree(root / kind, broken)
        (broken / "model.safetensors").write_bytes(b"not weights")
    images = root / "images"
    images.mkdir()
    rng = np.random.default_rng(4)
    for name in ("a.png", "b.jpg"):
        Image.fromarray((rng.random((41, 53, 3)) * 255).astype(np.uint8)).save(images / name)
    (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    for name, rate in (("speech.wav", 16000), ("phone.wav", 8000)):
        with wave.open(str(root / name), "wb") as writer:
            writer.setnchannels(1)
            writer.setsampwidth(2)
            writer.setframerate(rate)
            tone = np.sin(np.arange(rate // 2) / 7.0) * 8000
            writer.writeframes(tone.astype("<i2").tobytes())
    return root


def _one_line_exit_2(argv, capsys, expected: str) -> None:
    code, out, err = run(argv, capsys)
    lines = [line for line in err.splitlines() if line.startswith("headlab: error")]
    assert code == 2 and out == "" and len(lines) == 1 and expected in lines[0], (code, err)
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [
                "model",
                "heads",
                "--model-dir",
                "{root}/dinov2_registers_broken",
                "--image",
                "{root}/broken.png",
            ],
            "broken.png: not a readable image",
        ),
        (
            [
                "model",
                "heads",
                "--model-dir",
                "{root}/whisper_broken",
                "--audio",
                "{root}/phone.wav",
            ],
            "--audio must be sampled at 16000 Hz",
        ),
        (
            ["model", "heads", "--model-dir", "{root}/dinov2_registers_broken"],
            "is an image model: pass --image",
        ),
        (
            ["model", "importance", "--model-dir", "{root}/dinov2_registers_broken"],
            "reads pixel_values, not text",
        ),
        (
            ["model", "generate", "a prompt", "--model", "{root}/t5_broken"],
            "a decoder prompt needs a source",
        ),
        (
            ["model", "heads", "--model-dir", "{root}/t5_broken", "--image", "{root}/images"],
            "is an encoder-decoder model, which reads a source",
        ),
        (
            [
                "model",
                "ablate",
                "--model-dir",
                "{root}/t5_broken",
                "--source-text",
                "hi",
                "--ablate",
                "0.1",
                "--attention",
                "sideways",
            ],
            "--attention must be encoder or",
        ),
        (
            [
                "model",
                "heads",
                "--model-dir",
                "{root}/t5_broken",
                "--source-text",
                "hi",
                "--target-text",
                "a",
                "--target-text",
                "b",
            ],
            "--target-text: one per source",
        ),
    ],
)
def test_bad_input_to_the_new_kinds_is_one_line_before_the_model_loads(
    files, capsys, argv, expected
):
    _one_line_exit_2([a.format(root=files) for a in argv], capsys, expected)


def test_model_heads_of_an_encoder_decoder_writes_what_the_library_measures(
    files, capsys, tmp_path
):
    from headlab.heads.encoder_decoder_heads import encoder_decoder_statistics
    from headlab.heads.kind_inputs import KindInputs, source_target_pairs
    from headlab.models.hf.kinds_loader import load_encoder_decoder
    from headlab.results.stream_heads import EncoderDecoderHeads

    out = tmp_path / "heads.json"
    argv = [
        "model",
        "heads",
        "--model-dir",
        str(files / "t5"),
        "--source-text",
        "the cat sat",
        "--source-text",
        "hello",
        "--target-text",
        "le chat",
        "--target-text",
        "salut",
        "--metric",
        "max_weight",
        "--out",
        str(out),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    assert "max_weight per head, cross attention" in stdout
    written = EncoderDecoderHeads.from_dict(json.loads(out.read_text()))
    model = load_encoder_decoder(files / "t5")
    inputs = KindInputs(("the cat sat", "hello"), (), ("le chat", "salut"))
    want = encoder_decoder_statistics(model, source_target_pairs(model, inputs))
    assert set(written.kinds) == {"encoder", "decoder", "cross"}
    for kind, stats in want.kinds.items():
        for name, grid in stats.metrics.items():
            assert np.allclose(written.kinds[kind].metrics[name], grid, atol=1e-9), (kind, name)


def test_model_heads_of_an_image_folder_and_ablate_of_an_audio_source(files, capsys, tmp_path):
    from headlab.results.stream_heads import KindAblation, VisionHeads

    out = tmp_path / "vision.json"
    argv = [
        "model",
        "heads",
        "--model-dir",
        str(files / "dinov2_registers"),
        "--image",
        str(files / "images"),
        "--metric",
        "registers",
        "--out",
        str(out),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    result = VisionHeads.from_dict(json.loads(out.read_text()))
    assert result.n_images == 2 and result.registers == [1, 2, 3, 4] and result.grid == [5, 5]
    assert len(result.norm_ratios[0]) == result.num_layers + 1
    assert "registers per head" in stdout and "high-norm" in stdout
    out = tmp_path / "ablate.json"
    argv = [
        "model",
        "ablate",
        "--model-dir",
        str(files / "whisper"),
        "--audio",
        str(files / "speech.wav"),
        "--target-text",
        "hello",
        "--ablate",
        "1.0,2.1",
        "--out",
        str(out),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    ablation = KindAblation.from_dict(json.loads(out.read_text()))
    assert ablation.kind == "cross" and ablation.heads == [(1, 0), (2, 1)]
    assert ablation.ablated != ablation.baseline


def test_model_generate_from_a_source_equals_the_library(files, capsys):
    import torch

    from headlab.models.hf.kinds_loader import load_encoder_decoder

    argv = [
        "model",
        "generate",
        "he",
        "--model",
        str(files / "t5"),
        "--source-text",
        "a cat",
        "--max-new-tokens",
        "6",
        "--ablate",
        "0.2",
        "--json",
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    document = json.loads(stdout)
    model = load_encoder_decoder(files / "t5")
    masks = {"cross": [torch.tensor([1.0, 1.0, 0.0, 1.0]), None, None]}
    want = model.generate(model.source_texts(["a cat"]), 6, masks, prompt="he")[0]
    assert document["new_ids"] == want and document["ablated"] == [[0, 2]]

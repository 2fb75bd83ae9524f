"""``headlab circuits`` on an encoder-decoder: bad input is one line and exit code 2 before the
model loads (folders whose weights are unreadable: a load would fail with another message), and
a run writes the circuits results file with the library's scores, and its figure."""

from __future__ import annotations

import json
import shutil
import wave

import numpy as np
import pytest
from tiny_kinds import saved

from cli_run import run


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream-circuits")
    for kind in ("t5", "whisper"):
        (root / kind).mkdir()
        saved(kind, root / kind)
        broken = root / f"{kind}_broken"
        shutil.copytree(root / kind, broken)
        (broken / "model.safetensors").write_bytes(b"not weights")
    with wave.open(str(root / "phone.wav"), "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes((np.sin(np.arange(4000) / 7.0) * 8000).astype("<i2").tobytes())
    return root


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--model", "{root}/t5_broken", "--target-text", "hi"], "this command needs a source"),
        (["--model", "{root}/t5_broken"], "this command needs a source"),
        (
            ["--model", "{root}/t5_broken", "--source-text", "hi"],
            "--corrupted-source-text: one corrupted twin per source, got 0 for 1",
        ),
        (
            [
                "--model",
                "{root}/t5_broken",
                "--source-text",
                "hi",
                "--corrupted-source-text",
                "ho",
                "--method",
                "eap-ig",
            ],
            "--method must be one of eap, path-patching",
        ),
        (
            [
                "--model",
                "{root}/t5_broken",
                "--source-text",
                "hi",
                "--corrupted-source-text",
                "ho",
                "--task",
                "ioi",
            ],
            "--task: for decoder-only models",
        ),
        (
            [
                "--model",
                "{root}/t5_broken",
                "--source-text",
                "hi",
                "--corrupted-source-text",
                "ho",
                "--faithfulness-figure",
                "curve.png",
            ],
            "--faithfulness-figure: for decoder-only models",
        ),
        (
            [
                "--model",
                "{root}/whisper_broken",
                "--audio",
                "{root}/phone.wav",
                "--corrupted-audio",
                "{root}/phone.wav",
            ],
            "--audio must be sampled at 16000 Hz",
        ),
    ],
)
def test_bad_input_is_one_line_before_the_model_loads(folders, capsys, argv, expected):
    code, out, err = run(["circuits", *[a.format(root=folders) for a in argv]], capsys)
    lines = [line for line in err.splitlines() if line.startswith("headlab: error")]
    assert code == 2 and out == "" and len(lines) == 1 and expected in lines[0], (code, err)
    assert "Traceback" not in err


def test_circuits_of_an_encoder_decoder_writes_the_library_scores(folders, capsys, tmp_path):
    from headlab.circuits.stream_attribution import stream_attribution
    from headlab.circuits.stream_run import stream_inputs
    from headlab.heads.kind_inputs import KindInputs, source_batches, source_target_pairs
    from headlab.models.hf.kinds_loader import load_encoder_decoder
    from headlab.results.circuit_run import CircuitRun

    out, figure = tmp_path / "circuits.json", tmp_path / "circuit.png"
    argv = [
        "circuits",
        "--model",
        str(folders / "t5"),
        "--source-text",
        "the cat sat",
        "--corrupted-source-text",
        "the dog ran",
        "--target-text",
        "le chat",
        "--method",
        "eap",
        "--top",
        "7",
        "--out",
        str(out),
        "--figure",
        str(figure),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    assert "Top 7 of" in stdout and "source-target" in stdout
    assert f"wrote {figure}" in stdout and figure.read_bytes().startswith(b"\x89PNG")
    written = CircuitRun.from_dict(json.loads(out.read_text()))
    assert written.cross_heads_per_layer == [0] * 3 + [4] * 3  # the tiny T5's blocks
    model = load_encoder_decoder(folders / "t5")
    pairs = source_target_pairs(model, KindInputs(("the cat sat",), (), ("le chat",)))
    bad = source_batches(model, KindInputs(("the dog ran",)))
    inputs = stream_inputs(model, pairs, bad)
    want = stream_attribution(model, inputs.clean, inputs.corrupted, inputs.metric)
    assert written.scores.edges == want.edges
    assert np.allclose(written.scores.scores, want.scores, rtol=1e-5, atol=1e-7)
    across = [
        s
        for e, s in zip(want.edges, want.scores, strict=True)
        if e.startswith(("embed.encoder->", "0.")) and ".x" in e and e.endswith("<v>")
    ]
    assert across and max(map(abs, across)) > 0  # the source reaches the decoder's values

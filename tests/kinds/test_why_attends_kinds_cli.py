"""``headlab why-attends`` on encoder-decoders (tiny random T5, BART and Whisper saved with a
character tokenizer, Whisper's feature extractor): ``--attention cross`` splits a
cross-attention head over the source (text, or audio for Whisper), ``--attention encoder`` the
encoder's self-attention, the default the decoder's (BART's too: post-norm, learned positions).
The results file equals the library's split of the same inputs and reads back; the tables fit
80 columns; bad input is one line and exit 2, before the model loads (shown with folders whose
weights are unreadable: a load would fail with another message)."""

from __future__ import annotations

import json
import shutil
import wave

import numpy as np
import pytest
import torch
from tiny_kinds import saved

from cli_run import run
from headlab.results.output_policy import png_text_chunks
from headlab.results.score_split_result import ScoreSplitResult


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("why_kinds")
    for kind in ("t5", "bart", "whisper"):
        (root / kind).mkdir()
        saved(kind, root / kind)
    broken = root / "t5_broken"
    shutil.copytree(root / "t5", broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    decoder = root / "gpt2"  # a decoder-only config, no weights: never loaded
    decoder.mkdir()
    (decoder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    for name, rate in (("speech.wav", 16000), ("phone.wav", 8000)):
        with wave.open(str(root / name), "wb") as writer:
            writer.setnchannels(1)
            writer.setsampwidth(2)
            writer.setframerate(rate)
            tone = np.sin(np.arange(rate // 2) / 7.0) * 8000
            writer.writeframes(tone.astype("<i2").tobytes())
    return root


def _result(path) -> ScoreSplitResult:
    data = json.loads(path.read_text())
    assert data.pop("headlab") == "score-split"
    return ScoreSplitResult.from_dict(data)


def _ran(argv, capsys, monkeypatch, out) -> tuple[ScoreSplitResult, str]:
    monkeypatch.setenv("COLUMNS", "80")
    code, printed, err = run(["why-attends", *argv, "--out", str(out)], capsys)
    assert code == 0, err
    assert max(len(line) for line in printed.splitlines()) <= 80
    return _result(out), printed


def test_a_t5_cross_attention_head_equals_the_library(files, tmp_path, capsys, monkeypatch):
    out, figure = tmp_path / "x.json", tmp_path / "x.png"
    argv = ["--model-dir", str(files / "t5"), "--source-text", "the cat sat", "--text", "die k"]
    argv += ["--attention", "cross", "--layer", "2", "--head", "3", "--keys", "all"]
    got, printed = _ran([*argv, "--query", "-1", "--figure", str(figure)], capsys, monkeypatch, out)
    assert got.attention == "cross" and got.key_components[0] == "enc.embed"
    assert "key component" in printed and png_text_chunks(figure.read_bytes())

    from headlab.circuits.score_cross import CrossSides, split_cross_scores
    from headlab.circuits.score_keys import KeySpec
    from headlab.models.hf.kinds_loader import load_encoder_decoder

    model = load_encoder_decoder(files / "t5")
    source = model.source_texts(["the cat sat"])
    target = model.target_texts(["die k"])
    assert [p.key for p in got.pairs] == list(range(source.mask.shape[1]))
    assert got.key_tokens == list(source.labels[0])
    with torch.no_grad():
        want = split_cross_scores(
            CrossSides(model, source, target.input_ids),
            2,
            3,
            [target.input_ids.shape[1] - 1],
            KeySpec.parse("all"),
        )
    for a, b in zip(got.pairs, want.pairs, strict=True):
        assert (a.query, a.key) == (b.query, b.key)
        assert a.key_marginal == pytest.approx(b.key_marginal, abs=1e-6)
        assert abs(sum(a.key_marginal) - a.score) <= 1e-4
        assert [s.component for s in a.sources] == [s.component for s in b.sources]
        for split, same in zip(a.sources, b.sources, strict=True):
            assert split.values == pytest.approx(same.values, abs=1e-6)
    # the strongest encoder heads' key sides, by the source token each read
    split = got.pairs[0].sources[0]
    assert len(got.pairs[0].sources) == 3 and split.component.startswith("enc.")
    best = max(zip(split.positions, split.values, strict=True), key=lambda x: x[1])
    said = f"{split.component}'s key side by source: {best[0]} {got.key_tokens[best[0]]!r}"
    assert said in printed


def test_a_whisper_cross_attention_head_reads_audio(files, tmp_path, capsys, monkeypatch):
    argv = ["--model-dir", str(files / "whisper"), "--audio", str(files / "speech.wav")]
    argv += ["--text", "ab", "--attention", "cross", "--layer", "1", "--head", "1"]
    argv += ["--keys", "top-3", "--sources", "1"]
    got, _ = _ran(argv, capsys, monkeypatch, tmp_path / "w.json")
    assert len(got.pairs) == 3 and got.key_tokens[1] == "0.02s"  # 20 ms per source position
    assert all(len(pair.sources) == 1 for pair in got.pairs)
    assert all(c.startswith("enc.") for c in got.key_components[:-1])
    for pair in got.pairs:
        assert abs(sum(pair.query_marginal) - pair.score) <= 1e-4


def test_the_encoder_and_bart_decoder(files, tmp_path, capsys, monkeypatch):
    argv = ["--model-dir", str(files / "t5"), "--source-text", "the cat", "--layer", "1"]
    argv += ["--head", "0", "--attention", "encoder", "--query", "2", "--keys", "all"]
    got, _ = _ran(argv, capsys, monkeypatch, tmp_path / "e.json")
    assert [p.key for p in got.pairs] == list(range(8))  # "the cat" and </s>: keys after 2 too
    assert max(abs(p.bias_term) for p in got.pairs) > 1e-4  # T5's relative position bias
    argv = ["--model-dir", str(files / "bart"), "--source-text", "the cat", "--text", "a cat"]
    argv += ["--layer", "2", "--head", "1", "--keys", "all"]
    got, _ = _ran(argv, capsys, monkeypatch, tmp_path / "b.json")
    assert got.attention == "self" and "1.x1" in got.components
    for pair in got.pairs:
        assert abs(sum(pair.key_marginal) - pair.score) <= 1e-4


@pytest.mark.parametrize(
    ("model", "argv", "says"),
    [
        ("t5_broken", ["--attention", "cross"], "--attention cross reads an encoder-decoder"),
        ("t5_broken", ["--source-text", "a", "--attention", "side"], "--attention must be one of"),
        ("gpt2", ["--source-text", "a", "--attention", "cross"], "needs an encoder-decoder"),
        (
            "t5_broken",
            ["--source-text", "a", "--attention", "cross", "--keys", "induction"],
            "--keys for a cross-attention is",
        ),
        ("t5_broken", ["--source-text", "a", "--attention", "cross", "--recompute"], "--recompute"),
        ("t5_broken", ["--audio", "speech.wav"], "encoder reads text: pass --source-text"),
        ("whisper", ["--audio", "phone.wav", "--attention", "cross"], "sampled at 16000 Hz"),
    ],
)
def test_bad_input_before_the_model_loads(files, tmp_path, capsys, model, argv, says):
    argv = [str(files / a) if a.endswith(".wav") else a for a in argv]
    base = ["why-attends", "--model-dir", str(files / model), "--layer", "0", "--head", "0"]
    code, _out, err = run([*base, *argv, "--out", str(tmp_path / "w.json")], capsys)
    lines = [line for line in err.splitlines() if line.startswith("headlab: error")]
    assert code == 2 and len(lines) == 1 and says in lines[0], (code, err)
    assert "Traceback" not in err and not (tmp_path / "w.json").exists()


def test_a_t5_encoder_folder_equals_the_loaded_encoder_decoders_encoder(
    files, tmp_path, capsys, monkeypatch
):
    """A ``T5EncoderModel`` checkpoint loads through ``headlab.models.load`` as an encoder (not
    causal); with the encoder-decoder's weights, its split of a text is the split of the
    encoder-decoder's encoder reading that text as its source."""
    from transformers import T5EncoderModel

    from headlab.models import load

    folder = tmp_path / "t5_encoder"
    T5EncoderModel.from_pretrained(files / "t5").save_pretrained(folder)
    shutil.copy(files / "t5" / "tokenizer.json", folder)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (files / "t5" / name).exists():
            shutil.copy(files / "t5" / name, folder)
    assert load(folder).causal is False
    argv = ["--layer", "1", "--head", "2", "--query", "1", "--keys", "all"]
    alone, _ = _ran(
        ["--model-dir", str(folder), "--text", "a cat", *argv], capsys, monkeypatch, tmp_path / "a"
    )
    inside, _ = _ran(
        [
            "--model-dir",
            str(files / "t5"),
            "--source-text",
            "a cat",
            "--attention",
            "encoder",
            *argv,
        ],
        capsys,
        monkeypatch,
        tmp_path / "b",
    )
    assert len(alone.pairs) == len(inside.pairs) == 6  # "a cat" and </s>
    for a, b in zip(alone.pairs, inside.pairs, strict=True):
        assert (a.query, a.key) == (b.query, b.key)
        assert a.key_marginal == pytest.approx(b.key_marginal, abs=1e-5)
        assert a.score == pytest.approx(b.score, abs=1e-5)

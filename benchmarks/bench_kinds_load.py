"""Loading encoder-decoders and image models: headlab's loader with its probe cache cold and warm,
beside transformers' ``from_pretrained``, in one run.

The families and sizes of ``bench_kinds.py`` (random weights at whisper-tiny's, t5-small's,
bart-base's, ViT-B/16's, DINOv2-S/14 with registers' and CLIP ViT-B/32's vision tower's sizes;
nothing is downloaded), each saved once to a temporary folder and loaded, interleaved, in three
ways (medians of ``--repeats`` loads):

    eager     transformers' ``from_pretrained`` (eager attention)
    + forward transformers' ``from_pretrained`` and one short forward (the inputs headlab's
              probe runs: 5 source and 3 target tokens, Whisper's one 30 s window, one image):
              the weights a first use touches (they are mapped from the file, read on first
              touch)
    cold      ``kinds_loader`` with an empty probe cache: the full probe (one observed forward,
              the search of every head's query, key and value slice, the kinds told apart by
              the lengths of its calls), written to the cache
    cached    ``kinds_loader`` with the entry in the cache: a probe of one layer per template
              checks it (``models/hf/probe_cache.py``; an encoder-decoder's: two forwards that
              stop after a first block, the encoder's on the source and the decoder's on given
              encoder states)

Wall times, and the process's CPU time of the cached load over eager's (the machine's load moves
wall times more than CPU times).

    python benchmarks/bench_kinds_load.py [--repeats 3] [--families whisper,t5,...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_kinds import FAMILIES, build
from machine_load import load_average
from side_by_side import interleaved

VISION = ("vit", "dinov2_registers", "clip_vision")


def _with_cache(folder: str, load, source: str):
    """``load(source)`` with headlab's cache at ``folder``."""
    before = os.environ.get("HEADLAB_CACHE")
    os.environ["HEADLAB_CACHE"] = folder
    try:
        return load(source)
    finally:
        if before is None:
            del os.environ["HEADLAB_CACHE"]
        else:
            os.environ["HEADLAB_CACHE"] = before


def _first_inputs(family: str, model) -> dict:
    """The forward's keywords of headlab's probe: 5 source and 3 target tokens, Whisper's one
    window of zeros, one blank image at the model's size."""
    import torch

    config = model.config
    if family in VISION:
        size = int(config.image_size)
        return {"pixel_values": torch.zeros(1, int(config.num_channels), size, size)}
    target = torch.tensor([[0, 1, 2]])
    if family == "whisper":
        frames = 2 * int(config.max_source_positions)
        return {
            "input_features": torch.zeros(1, int(config.num_mel_bins), frames),
            "decoder_input_ids": target,
        }
    source = torch.arange(1, 6)[None]
    return {
        "input_ids": source,
        "attention_mask": torch.ones_like(source),
        "decoder_input_ids": target,
    }


def _with_cpu(steps: dict, cpu: dict) -> dict:
    """``steps`` whose calls also add their process CPU time (ms) to ``cpu[name]``."""

    def timed(name, step):
        def run():
            start = time.process_time()
            step()
            cpu.setdefault(name, []).append((time.process_time() - start) * 1e3)

        return run

    return {name: timed(name, step) for name, step in steps.items()}


def bench_family(family: str, repeats: int) -> str:
    """One markdown row: ``family``'s loads."""
    import torch
    import transformers

    from headlab.models.hf.kinds_loader import load_encoder_decoder, load_vision

    model = build(family).eval()
    params = sum(p.numel() for p in model.parameters())
    load = load_vision if family in VISION else load_encoder_decoder
    first_inputs = _first_inputs(family, model)

    def eager():
        return type(model).from_pretrained(folder, attn_implementation="eager")

    def eager_forward():
        with torch.no_grad():
            eager()(**first_inputs)

    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as caches:
        model.save_pretrained(folder, safe_serialization=True)
        if family in VISION:
            transformers.ViTImageProcessor().save_pretrained(folder)
        warm = str(Path(caches) / "warm")
        _with_cache(warm, load, folder)  # the entry the cached loads read

        def cold():
            return _with_cache(tempfile.mkdtemp(dir=caches), load, folder)

        cpu: dict[str, list[float]] = {}
        steps = {
            "eager": eager,
            "eager_forward": eager_forward,
            "cold": cold,
            "cached": lambda: _with_cache(warm, load, folder),
        }
        times = interleaved(_with_cpu(steps, cpu), repeats, 0)
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu_eager, cpu_cached = (statistics.median(cpu[k]) for k in ("eager", "cached"))
    return (
        f"| {family} | {params / 1e6:.0f}M | {med['eager']:.0f} | {med['eager_forward']:.0f} | "
        f"{med['cold']:.0f} | {med['cached']:.0f} | {med['cold'] / med['eager']:.1f} | "
        f"{med['cached'] / med['eager']:.1f} | {med['cached'] / med['eager_forward']:.1f} | "
        f"{cpu_cached / cpu_eager:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    print(f"load average at start: {load_average():.1f}")
    print(
        "| family | params | eager ms | eager + forward ms | headlab cold ms | headlab cached ms "
        "| cold / eager | cached / eager | cached / (eager + forward) | cached / eager CPU |"
    )
    print("| --- " * 10 + "|")
    for family in args.families.split(","):
        print(bench_family(family, args.repeats), flush=True)
    print(f"load average at end: {load_average():.1f}")


if __name__ == "__main__":
    main()

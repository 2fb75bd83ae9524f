"""Loading encoder-decoders and image models: headlab's loader with its probe cache cold and warm,
beside transformers' ``from_pretrained``, in one run.

The families and sizes of ``bench_kinds.py`` (random weights at whisper-tiny's, t5-small's,
bart-base's, ViT-B/16's, DINOv2-S/14 with registers' and CLIP ViT-B/32's vision tower's sizes;
nothing is downloaded), each saved once to a temporary folder and loaded, interleaved, in three
ways (medians of ``--repeats`` loads):

    eager     transformers' ``from_pretrained`` (eager attention)
    cold      ``kinds_loader`` with an empty probe cache: the full probe (an observed forward and
              the search of every head's query, key and value slice), written to the cache
    cached    ``kinds_loader`` with the entry in the cache: a probe of one layer per template
              checks it (``models/hf/probe_cache.py``)

Both headlab loads also run the forward that sorts the layers by kind (encoder, decoder, cross).

    python benchmarks/bench_kinds_load.py [--repeats 3] [--families whisper,t5,...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
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


def bench_family(family: str, repeats: int) -> str:
    """One markdown row: ``family``'s three loads."""
    import transformers

    from headlab.models.hf.kinds_loader import load_encoder_decoder, load_vision

    model = build(family).eval()
    params = sum(p.numel() for p in model.parameters())
    load = load_vision if family in VISION else load_encoder_decoder
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as caches:
        model.save_pretrained(folder, safe_serialization=True)
        if family in VISION:
            transformers.ViTImageProcessor().save_pretrained(folder)
        warm = str(Path(caches) / "warm")
        _with_cache(warm, load, folder)  # the entry the cached loads read

        def cold():
            return _with_cache(tempfile.mkdtemp(dir=caches), load, folder)

        times = interleaved(
            {
                "eager": lambda: type(model).from_pretrained(folder, attn_implementation="eager"),
                "cold": cold,
                "cached": lambda: _with_cache(warm, load, folder),
            },
            repeats,
            0,
        )
    eager, first, cached = (statistics.median(times[k]) for k in ("eager", "cold", "cached"))
    return (
        f"| {family} | {params / 1e6:.0f}M | {eager:.0f} | {first:.0f} | {cached:.0f} | "
        f"{first / eager:.1f} | {cached / eager:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    print(f"load average at start: {load_average():.1f}")
    print(
        "| family | params | eager ms | headlab cold ms | headlab cached ms | cold / eager | "
        "cached / eager |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for family in args.families.split(","):
        print(bench_family(family, args.repeats), flush=True)
    print(f"load average at end: {load_average():.1f}")


if __name__ == "__main__":
    main()

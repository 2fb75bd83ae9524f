"""Circuits on an image model beside transformers' own forward, in one run: the model's forward on
the clean image (transformers' class, eager attention and headlab's), EAP over every edge, and
exact path patching of a sample of edges (every 50th), each timed in CPU and wall seconds.

    python benchmarks/bench_image_circuits.py FOLDER clean.png corrupted.png
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def timed(label: str, call, rows: list) -> object:
    cpu, wall = time.process_time(), time.perf_counter()
    out = call()
    rows.append((label, time.process_time() - cpu, time.perf_counter() - wall))
    return out


def main() -> None:
    import torch
    from PIL import Image

    from headlab.circuits.image_inputs import image_inputs
    from headlab.circuits.stream_attribution import stream_attribution
    from headlab.circuits.stream_patching import StreamPatcher
    from headlab.models.hf.kinds_loader import load_vision
    from headlab.models.hf.registry import register

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("clean", type=Path)
    parser.add_argument("corrupted", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows: list = []
    model = timed("load (headlab)", lambda: load_vision(args.folder), rows)
    clean = model.pixels([Image.open(args.clean).convert("RGB")])
    bad = model.pixels([Image.open(args.corrupted).convert("RGB")])
    with torch.no_grad():
        model.model.set_attn_implementation("eager")
        timed("forward, transformers eager", lambda: model.body(pixel_values=clean), rows)
        model.model.set_attn_implementation(register())
        timed("forward, headlab", lambda: model.body(pixel_values=clean), rows)
    inputs = timed("metric (2 forwards)", lambda: image_inputs(model, clean, bad), rows)
    patcher = timed(
        "clean and corrupted caches",
        lambda: StreamPatcher(model, clean, bad, inputs.metric),
        rows,
    )
    edges = [e.name for e in patcher.graph.edges]
    timed(
        f"EAP, {len(edges)} edges",
        lambda: stream_attribution(model, clean, bad, inputs.metric, patcher=patcher),
        rows,
    )
    sample = edges[::50]
    timed(f"path patching, {len(sample)} edges", lambda: patcher.effects(sample), rows)
    print(f"{model.name}: {len(patcher.blocks)} blocks, {clean.shape[-1]} px, 1 thread")
    print(f"load average {os.getloadavg()[0]:.1f}")
    for label, cpu, wall in rows:
        print(f"{label:32s} cpu {cpu:7.2f} s   wall {wall:7.2f} s")


if __name__ == "__main__":
    main()

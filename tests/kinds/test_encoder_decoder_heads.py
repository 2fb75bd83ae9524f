"""Encoder-decoders (T5, BART, Marian, Whisper) on headlab's attention against transformers' eager
attention on random tiny models: logits, per-head statistics of each attention kind, ablation of
a cross-attention head before the cross-attention's W_O, and greedy generation with and without
an ablated head."""

from __future__ import annotations

import pytest
import torch
from tiny_kinds import ENCODER_DECODERS, twins, whisper_features

from headlab.heads.encoder_decoder_heads import (
    encoder_decoder_ablation,
    encoder_decoder_statistics,
)
from headlab.models.hf.encoder_decoder import EncoderDecoderModel
from headlab.results.stream_heads import EncoderDecoderHeads


@pytest.fixture(scope="module", params=ENCODER_DECODERS)
def pair(request):
    eager, ours = twins(request.param)
    features = whisper_features() if request.param == "whisper" else None
    return request.param, eager, EncoderDecoderModel(request.param, ours, features=features)


def _source(kind: str, model: EncoderDecoderModel):
    if kind == "whisper":
        g = torch.Generator().manual_seed(1)
        waves = [torch.randn(16000, generator=g) * 0.1, torch.randn(9000, generator=g) * 0.1]
        return model.source_audio(waves, 16000)
    eos = int(model.config.eos_token_id)
    return model.source_ids([[5, 6, 7, 8, 9, 10, 11, eos], [12, 13, 14, eos]])


def _eager_out(eager, source, target):
    with torch.no_grad():
        return eager(
            **source.inputs,
            decoder_input_ids=target.input_ids,
            decoder_attention_mask=target.attention_mask.long(),
            output_attentions=True,
            use_cache=False,
        )


def _reference(weights: torch.Tensor, queries: torch.Tensor, same_stream: bool, last):
    """name -> (head,) mean over counted queries, from full (batch, head, q_pos, k_pos) weights."""
    w = weights.double()
    counted = queries.double()[:, None, :]  # (batch, 1, q_pos)
    n = counted.sum()
    mean = lambda per_query: (per_query * counted).sum(dim=(0, 2)) / n  # noqa: E731
    plogp = torch.where(w > 0, w * w.clamp_min(1e-300).log(), torch.zeros_like(w))
    out = {
        "entropy": mean(-plogp.sum(-1)),
        "max_weight": mean(w.amax(-1)),
        "first": mean(w[..., 0]),
    }
    if last is not None:
        index = last.view(-1, 1, 1, 1).expand(*w.shape[:3], 1)
        out["last"] = mean(w.gather(-1, index)[..., 0])
    if same_stream:
        q = torch.arange(w.shape[2])
        out["self"] = mean(w.diagonal(dim1=-2, dim2=-1))
        offsets = (q[:, None] - torch.arange(w.shape[3])[None]).abs().double()
        out["distance"] = mean((w * offsets).sum(-1))
    return out


def test_encoder_decoder_logits_equal_eager(pair):
    kind, eager, model = pair
    source = _source(kind, model)
    target = model.target_ids([[20, 21, 22, 23, 24], [30, 31]])
    with torch.no_grad():
        ours = model.run(source, target)
    want = _eager_out(eager, source, target).logits
    assert (ours - want).abs().max() < 1e-5


def test_statistics_of_each_kind_equal_eager_weights(pair):
    kind, eager, model = pair
    source = _source(kind, model)
    target = model.target_ids([[20, 21, 22, 23, 24], [30, 31]])
    stats = encoder_decoder_statistics(model, [(source, target)])
    out = _eager_out(eager, source, target)
    last = source.mask.sum(1) - 1 if kind != "whisper" else None
    eager_weights = {
        "encoder": (out.encoder_attentions, source.mask, True, last),
        "decoder": (out.decoder_attentions, target.attention_mask, True, None),
        "cross": (out.cross_attentions, target.attention_mask, False, last),
    }
    assert set(stats.kinds) == set(eager_weights)
    for name, (weights, queries, same, last_index) in eager_weights.items():
        measured = stats.kinds[name]
        assert measured.num_layers == len(weights)
        assert ("self" in measured.metrics) == same
        for layer, w in enumerate(weights):
            for metric, values in _reference(w, queries, same, last_index).items():
                got = torch.tensor(measured.metrics[metric][layer], dtype=torch.float64)
                assert torch.allclose(got, values, atol=1e-5), (name, layer, metric)
    again = EncoderDecoderHeads.from_dict(stats.to_dict())
    assert again == stats


def _output_projection(eager, model, kind, layer):
    path = model.layers[kind][layer].output.path
    return eager.get_submodule(path)


def _zeroing_hook(head: int, d_head: int):
    def hook(module, args):
        x = args[0].clone()  # (batch, q_pos, head * d_head)
        x[..., head * d_head : (head + 1) * d_head] = 0
        return (x,)

    return hook


def test_cross_attention_head_ablated_before_its_w_o_equals_eager(pair):
    kind, eager, model = pair
    source = _source(kind, model)
    target = model.target_ids([[20, 21, 22, 23, 24], [30, 31, 32]])
    layer, head = 1, 1
    result = encoder_decoder_ablation(model, [(source, target)], "cross", [(layer, head)])
    d_head = model.layers["cross"][layer].head_dim
    handle = _output_projection(eager, model, "cross", layer).register_forward_pre_hook(
        _zeroing_hook(head, d_head)
    )
    try:
        logits = _eager_out(eager, source, target).logits
    finally:
        handle.remove()
    wanted = target.input_ids[:, 1:]
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), wanted, reduction="none"
    )
    want = float(losses[target.attention_mask[:, 1:]].mean())
    assert abs(result.ablated - want) < 1e-5
    assert abs(result.baseline - float(model.loss(source, target).detach())) < 1e-6
    assert result.ablated != result.baseline


def _eager_generate(eager, source, n):
    with torch.no_grad():
        out = eager.generate(**source.inputs, max_new_tokens=n, do_sample=False, num_beams=1)
    return out.tolist()


def test_greedy_generation_equals_eager_with_and_without_an_ablated_head(pair):
    kind, eager, model = pair
    source = _source(kind, model)
    ours = model.generate(source, 7)
    start = model.start_id()
    strip = lambda rows: [r[1:] if r and r[0] == start else r for r in rows]  # noqa: E731
    want = strip(_eager_generate(eager, source, 7))
    assert [r == w[: len(r)] for r, w in zip(ours, want, strict=True)] == [True, True]
    layer, head = 0, 0
    masks = {
        "cross": [torch.tensor([0.0, 1.0] + [1.0] * (model.heads_per_layer("cross")[0] - 2))]
        + [None] * (len(model.layers["cross"]) - 1)
    }
    ablated = model.generate(source, 7, masks)
    d_head = model.layers["cross"][layer].head_dim
    handle = _output_projection(eager, model, "cross", layer).register_forward_pre_hook(
        _zeroing_hook(head, d_head)
    )
    try:
        want = strip(_eager_generate(eager, source, 7))
    finally:
        handle.remove()
    assert [r == w[: len(r)] for r, w in zip(ablated, want, strict=True)] == [True, True]


def test_attention_kinds_are_found_by_lengths_not_names(pair):
    _, eager, model = pair
    config = eager.config
    encoder_layers = getattr(config, "encoder_layers", None) or config.num_layers
    decoder_layers = getattr(config, "decoder_layers", None) or config.num_decoder_layers
    assert len(model.layers["encoder"]) == encoder_layers
    assert len(model.layers["decoder"]) == decoder_layers
    assert len(model.layers["cross"]) == decoder_layers
    assert all(layer.output is not None for layers in model.layers.values() for layer in layers)


def test_audio_at_another_rate_is_refused():
    _, ours = twins("whisper")
    model = EncoderDecoderModel("whisper", ours, features=whisper_features())
    with pytest.raises(ValueError, match="16000 Hz, got 8000 Hz"):
        model.source_audio([torch.zeros(800)], 8000)

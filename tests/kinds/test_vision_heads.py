"""Image encoders (ViT, DINOv2, DINOv2 with registers, CLIP's vision tower) on headlab's attention
against transformers' eager attention on random tiny models: outputs, per-head statistics over
patches, norm ratios and high-norm tokens, and ablation before W_O."""

from __future__ import annotations

import pytest
import torch
from tiny_kinds import VISION, twins

from headlab.heads.vision_heads import vision_ablation, vision_statistics
from headlab.models.hf.vision import VisionModel
from headlab.results.stream_heads import VisionHeads


@pytest.fixture(scope="module", params=VISION)
def pair(request):
    eager, ours = twins(request.param)
    return request.param, eager, VisionModel(request.param, ours)


def _pixels(seed: int = 2) -> torch.Tensor:
    return torch.randn(2, 3, 35, 35, generator=torch.Generator().manual_seed(seed))


def _eager(eager, pixels):
    with torch.no_grad():
        return eager(pixel_values=pixels, output_attentions=True, output_hidden_states=True)


def test_vision_output_equals_eager(pair):
    _, eager, model = pair
    pixels = _pixels()
    with torch.no_grad():
        ours = model.run(pixels).last_hidden_state
    assert (ours - _eager(eager, pixels).last_hidden_state).abs().max() < 1e-5


def test_vision_statistics_equal_eager_weights_by_brute_force(pair):
    kind, eager, model = pair
    pixels = _pixels()
    stats = vision_statistics(model, [pixels[:1], pixels[1:]], threshold=1.2)
    out = _eager(eager, pixels)
    registers = 4 if kind == "dinov2_registers" else 0
    assert stats.registers == list(range(1, 1 + registers))
    assert stats.grid == [5, 5]
    first = 1 + registers
    for layer, w in enumerate(out.attentions):  # (batch, head, q_pos, k_pos)
        w = w.double()
        states = out.hidden_states[layer].double()  # (batch, pos, d_model)
        norms = states.norm(dim=-1)
        ratio = norms / norms[:, first:].median(dim=-1).values[:, None]
        assert torch.allclose(torch.tensor(stats.norm_ratios)[:, layer].double(), ratio, atol=1e-4)
        high = [[t for t in range(first, w.shape[-1]) if ratio[b, t] > 1.2] for b in range(2)]
        assert stats.high_norm_tokens(layer) == high
        for head in range(w.shape[1]):
            rows = w[:, head]  # (batch, q_pos, k_pos)
            want = {
                "cls": rows[..., 0].mean(),
                "max_weight": rows.amax(-1).mean(),
                "entropy": -(rows * rows.log()).sum(-1).mean(),
                "high_norm": torch.stack(
                    [rows[b][:, high[b]].sum(-1).mean() for b in range(2)]
                ).mean(),
            }
            if registers:
                want["registers"] = rows[..., 1:first].sum(-1).mean()
            distances = []  # brute force: each patch query, each patch key
            for b in range(2):
                for q in range(first, w.shape[-1]):
                    total = mass = 0.0
                    for k in range(first, w.shape[-1]):
                        (qr, qc), (kr, kc) = divmod(q - first, 5), divmod(k - first, 5)
                        total += float(rows[b, q, k]) * ((qr - kr) ** 2 + (qc - kc) ** 2) ** 0.5
                        mass += float(rows[b, q, k])
                    distances.append(total / mass)
            want["patch_distance"] = torch.tensor(distances).double().mean()
            for name, value in want.items():
                assert abs(stats.metrics[name][layer][head] - float(value)) < 1e-5, (name, layer)
    assert VisionHeads.from_dict(stats.to_dict()) == stats


def test_vision_head_ablated_before_w_o_equals_eager(pair):
    _, eager, model = pair
    pixels = _pixels(5)
    layer, head = 2, 3
    result = vision_ablation(model, [pixels], [(layer, head)])
    d_head = model.layers[layer].head_dim

    def zero(module, args):
        x = args[0].clone()
        x[..., head * d_head : (head + 1) * d_head] = 0
        return (x,)

    base = _eager(eager, pixels).last_hidden_state[:, 0]
    output = eager.get_submodule(model.layers[layer].output.path)
    handle = output.register_forward_pre_hook(zero)
    try:
        ablated = _eager(eager, pixels).last_hidden_state[:, 0]
    finally:
        handle.remove()
    want = float((1 - torch.cosine_similarity(base, ablated, dim=-1)).mean())
    assert abs(result.ablated - want) < 1e-6
    assert result.ablated > 0


def test_pixels_of_a_wrong_shape_are_refused(pair):
    _, _, model = pair
    with pytest.raises(ValueError, match=r"\(batch, 3, height, width\) floats"):
        model.run(torch.zeros(3, 35, 35))
    with pytest.raises(ValueError, match="multiples of the patch size 7"):
        model.run(torch.zeros(1, 3, 36, 35))

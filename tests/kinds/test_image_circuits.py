"""Circuits on image encoders: random tiny ViT with a classification head, DINOv2 with registers
(with and without its head) and CLIP's vision tower in float64. The run protocol's runs from a
block against transformers' own forward, the readout against the model's own outputs, and exact
path patching and EAP of edges of every kind (embeddings into a head's q, k and v, a head into a
later head and into an MLP, an MLP into the readout) against brute force (stream_brute_force.py:
whole forwards of transformers' model with interventions; EAP against autograd through them).

Sizes are prime and distinct: 2 blocks, 3 heads of 7 dimensions (d_model 21), an MLP of 37, a
5 x 5 grid of 7-pixel patches, 11 classes, 4 registers.
"""

from __future__ import annotations

import pytest
import torch
from stream_brute_force import BruteForce

from headlab.attention.interventions import intervene
from headlab.circuits.image_inputs import image_inputs
from headlab.circuits.stream_attribution import stream_attribution
from headlab.circuits.stream_graph import stream_graph_of
from headlab.circuits.stream_patching import StreamPatcher
from headlab.models.hf.vision import VisionModel
from headlab.models.run_protocol import cache

KINDS = ("vit_classifier", "dinov2_registers", "dinov2_registers_classifier", "clip_vision")


def _tiny(kind: str):
    import transformers as tf

    from headlab.models.hf.registry import register

    sizes = dict(
        hidden_size=21,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=37,
        image_size=35,
        patch_size=7,
        num_channels=3,
    )
    torch.manual_seed(5)
    if kind == "vit_classifier":
        model = tf.ViTForImageClassification(tf.ViTConfig(num_labels=11, **sizes))
    elif kind.startswith("dinov2_registers"):
        config = tf.Dinov2WithRegistersConfig(
            num_register_tokens=4, layerscale_value=0.7, num_labels=11, **sizes
        )
        head = kind.endswith("classifier")
        build = (
            tf.Dinov2WithRegistersForImageClassification if head else tf.Dinov2WithRegistersModel
        )
        model = build(config)
    else:
        model = tf.CLIPVisionModel(tf.CLIPVisionConfig(**sizes))
    model.eval().set_attn_implementation(register())
    return model


def _own_readout(model: VisionModel):
    """Pixel values -> (batch, 1, output_width): transformers' own forward and output."""

    def run(pixels):
        out = model.model(pixel_values=pixels)
        if model.has_head:
            return out.logits[:, None]
        pooled = getattr(out, "pooler_output", None)
        if model.family.startswith("clip"):
            return pooled[:, None]  # CLIP: the class token through its post-layernorm
        return out.last_hidden_state[:, :1]

    return run


@pytest.fixture(scope="module", params=KINDS)
def case(request):
    model = VisionModel(request.param, _tiny(request.param))
    model.model.double()
    g = torch.Generator().manual_seed(13)
    clean = torch.randn(2, 3, 35, 35, generator=g, dtype=torch.float64)
    corrupted = torch.randn(2, 3, 35, 35, generator=g, dtype=torch.float64)
    return request.param, model, clean, corrupted


def test_blocks_are_one_stream_of_patches(case):
    _, model, *_ = case
    assert [s.name for s in model.streams()] == ["patches"]
    assert model.streams()[0].named_positions == ("cls", "register")
    assert [b.stream for b in model.blocks()] == ["patches"] * 2
    assert all(b.cross_attention is None and not b.parallel for b in model.blocks())


def test_runs_and_readout_equal_the_models_own_forward(case):
    """The readout of a whole run is transformers' own output; a run from block s with a
    changed stream equals transformers' forward with that stream put at block s's input."""
    _, model, clean, _ = case
    own = _own_readout(model)
    torch.testing.assert_close(
        model.unembed(model.run_blocks(clean)), own(clean), rtol=0, atol=1e-12
    )
    kept = cache(model, clean)
    for start, block in enumerate(model.blocks()):
        g = torch.Generator().manual_seed(start)
        hidden = kept.resid[start] + 0.3 * torch.randn(
            kept.resid[start].shape, generator=g, dtype=torch.float64
        )
        with intervene(block, "resid_in", lambda t, h=hidden: h):
            want = own(clean)
        got = model.unembed(model.run_blocks(clean, start=start, hidden=hidden, copies=1))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def _sampled(patcher: StreamPatcher) -> list:
    """One edge of each (receiver kind, its input, sender kind): every kind of edge."""
    graph, chosen = patcher.graph, {}
    for edge in graph.edges:
        key = (graph.node(edge.receiver).kind, edge.input, graph.node(edge.sender).kind)
        chosen.setdefault(key, edge)
    return list(chosen.values())


def test_path_patching_and_eap_equal_brute_force(case):
    _, model, clean, corrupted = case
    inputs = image_inputs(model, clean, corrupted)
    metric = inputs.metric
    assert metric.kind == ("logit_diff" if model.has_head else "cls_projection")
    patcher = StreamPatcher(model, clean, corrupted, metric)
    brute = BruteForce(model, clean, corrupted, metric, run=_own_readout(model))
    assert patcher.clean_value == pytest.approx(brute.clean_value, abs=1e-10)
    edges = _sampled(patcher)
    kinds = {(patcher.graph.node(e.sender).kind, patcher.kind(e)[1], e.input) for e in edges}
    wanted = {("embed", "self", site) for site in "qkv"}
    wanted |= {("head", "self", site) for site in "qkv"}
    wanted |= {("head", "mlp", "in"), ("mlp", "logits", "in"), ("mlp", "self", "k")}
    assert wanted <= kinds
    names = [e.name for e in edges]
    effects = patcher.effects(names, chunk=4)
    want = torch.tensor(
        [float(brute.effect(patcher.graph, e).detach()) for e in edges], dtype=torch.float64
    )
    scale = float(want.abs().max())
    assert scale > 1e-6
    torch.testing.assert_close(effects, want, rtol=1e-9, atol=1e-9 * scale)
    scores = torch.tensor(
        stream_attribution(model, clean, corrupted, metric, names, patcher=patcher).scores,
        dtype=torch.float64,
    )
    slopes = torch.tensor([brute.derivative(patcher.graph, e) for e in edges], dtype=torch.float64)
    slope_scale = float(slopes.abs().max())
    assert slope_scale > 1e-6
    torch.testing.assert_close(scores, slopes, rtol=1e-8, atol=1e-9 * slope_scale)


def test_the_metric_separates_clean_from_corrupted(case):
    """Clean minus corrupted: a head's logit difference is at least 0 on the clean image (its
    predicted class); the class-token projection's is the distance between the two states."""
    _, model, clean, corrupted = case
    inputs = image_inputs(model, clean, corrupted)
    patcher = StreamPatcher(model, clean, corrupted, inputs.metric)
    if model.has_head:
        assert patcher.clean_value >= 0
        return
    own = _own_readout(model)
    with torch.no_grad():
        distance = (own(clean) - own(corrupted))[:, 0].norm(dim=-1).mean()
    assert patcher.clean_value - patcher.corrupted_value == pytest.approx(float(distance))


def test_graph_of_an_image_encoder_counted_by_hand():
    """2 blocks of 3 heads: block 0's heads read embed (3 x 3 inputs = 9 edges); mlp.0 reads
    embed and 3 heads (4); block 1's heads read 5 senders (3 x 3 x 5 = 45); mlp.1 reads 8;
    logits 9."""
    from headlab.circuits.stream_graph import StreamBlockShape, StreamGraph

    graph = StreamGraph((StreamBlockShape("patches", 3), StreamBlockShape("patches", 3)))
    assert len(graph.edges) == 9 + 4 + 45 + 8 + 9
    assert graph.node("embed").stream == "patches"  # one stream: named as a decoder's
    assert graph.edge("mlp.0->1.2<v>").receiver == "1.2"


def test_pairs_of_two_sizes_identical_images_and_one_class_are_refused(case, monkeypatch):
    _, model, clean, _ = case
    with pytest.raises(ValueError, match="one per image, of its size"):
        image_inputs(model, clean, clean[:1])
    if not model.has_head:
        with pytest.raises(ValueError, match="same class-token state"):
            image_inputs(model, clean, clean.clone())
        return
    own = model.unembed
    monkeypatch.setattr(model, "unembed", lambda states: own(states)[..., :1])  # one output
    with pytest.raises(ValueError, match="needs two classes or more"):
        image_inputs(model, clean, clean.flip(-1))


def test_graph_reads_the_image_encoders_blocks(case):
    _, model, *_ = case
    graph = stream_graph_of(model)
    assert [n.name for n in graph.nodes][:1] == ["embed"]
    assert sum(n.kind == "head" for n in graph.nodes) == 6

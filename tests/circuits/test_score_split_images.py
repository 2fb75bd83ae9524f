"""The score split on image encoders against a forward written by hand from the modules' weights.

Random tiny ViT, DINOv2 with registers (a layer scale of random values, an image of another
shape than its config's: its position embeddings interpolated) and CLIP's vision tower (its
pre-layernorm before the blocks), in float64. The reference recomputes each block with torch
ops from the weights (LayerNorm, q, k, v, softmax, W_O, layer scale, MLP); it equals headlab's
stream within 1e-12 and transformers' eager ``hidden_states`` and ``attentions`` within 1e-6
(eager takes its softmax in float32, the reference in float64). Its pre-softmax scores are
``q . k / sqrt(d_head)``. The split's terms must sum to them within 1e-10, and taking one
component's write (built by hand: the patch convolution, the class token, the registers, the
position embeddings, a head through its W_O slice times the layer scale, an MLP) out of the key
input only, the LayerNorm held at the real stream's scale, must move the score by exactly its
key-side term. Sizes are prime where the families allow: 5 heads of 7, an MLP of 37, 3 layers,
5-pixel patches, 17 tokens (ViT, CLIP: a 4 x 4 grid) and 29 (DINOv2: 4 x 6 patches, 4
registers).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from headlab.circuits.image_keys import ImageKeys
from headlab.circuits.image_sides import ImageSides
from headlab.circuits.score_keys import KeySpec
from headlab.circuits.score_split import split_scores
from headlab.models.hf.image_stream import ImageStream
from headlab.models.hf.vision import VisionModel

HEADS, D_HEAD, LAYERS = 5, 7, 3
KINDS = ("vit", "dinov2_registers", "clip_vision")
SIZES = dict(
    hidden_size=HEADS * D_HEAD,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=37,
    image_size=20,
    patch_size=5,
    num_channels=3,
)


def _build(kind: str):
    import transformers as tf

    torch.manual_seed(7)
    if kind == "vit":
        model = tf.ViTModel(tf.ViTConfig(**SIZES), add_pooling_layer=False)
    elif kind == "dinov2_registers":
        config = tf.Dinov2WithRegistersConfig(num_register_tokens=4, **SIZES)
        model = tf.Dinov2WithRegistersModel(config)
    else:
        model = tf.CLIPVisionModel(tf.CLIPVisionConfig(**SIZES))
    with torch.no_grad():  # the init's constant norms, biases and layer scales become random
        for parameter in model.parameters():
            if parameter.ndim == 1:
                parameter.normal_(0.3, 0.4)
    return model.double().eval()


@pytest.fixture(scope="module", params=KINDS)
def case(request):
    from headlab.models.hf.registry import register

    eager = _build(request.param)
    eager.set_attn_implementation("eager")
    ours = copy.deepcopy(eager)
    ours.set_attn_implementation(register())
    width = 30 if request.param.startswith("dinov2") else 20
    pixels = torch.randn(1, 3, 20, width, generator=torch.Generator().manual_seed(3)).double()
    stream = ImageStream(VisionModel(request.param, ours), pixels)
    return request.param, eager, pixels, ImageSides(stream), _hand_run(request.param, eager, pixels)


def _parts(kind: str, model):
    """(body, blocks, and per block: norm1, attention, o, lambda1, norm2, mlp, lambda2)."""
    body = getattr(model, "vision_model", model)
    blocks = body.layers if kind == "vit" else getattr(body.encoder, "layers", None)
    out = []
    for b in blocks if blocks is not None else body.encoder.layer:
        if kind == "vit":
            out.append(
                (b.layernorm_before, b.attention, b.attention.o_proj, 1.0, b.layernorm_after)
            )
        elif kind == "clip_vision":
            out.append((b.layer_norm1, b.self_attn, b.self_attn.out_proj, 1.0, b.layer_norm2))
        else:
            out.append((b.norm1, b.attention, b.attention.o_proj, b.layer_scale1.lambda1, b.norm2))
        lam2 = b.layer_scale2.lambda1 if kind.startswith("dinov2") else 1.0
        out[-1] = (*out[-1], b.mlp, lam2)
    return body, out


def _norm(x, norm):
    """LayerNorm by hand: (output, 1 / scale) (rows, 1)."""
    centred = x - x.mean(-1, keepdim=True)
    inv = 1 / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + norm.eps)
    return norm.weight * centred * inv + norm.bias, inv


def _embedding_parts(kind: str, body, pixels):
    """name -> (pos, d_model) each part of the embeddings by hand (before any pre-norm)."""
    e = body.embeddings
    conv = e.patch_embedding if kind == "clip_vision" else e.patch_embeddings.projection
    patches = F.conv2d(pixels, conv.weight, None, stride=conv.stride)[0].flatten(1).t()
    d = patches.shape[1]
    registers = 4 if kind.startswith("dinov2") else 0
    tokens = 1 + registers + patches.shape[0]
    zeros = patches.new_zeros(tokens, d)
    parts = {"patch-embed": zeros.clone(), "cls-token": zeros.clone(), "pos-embed": zeros.clone()}
    parts["patch-embed"][1 + registers :] = patches
    cls = e.class_embedding if kind == "clip_vision" else e.cls_token[0, 0]
    parts["cls-token"][0] = cls
    if kind == "clip_vision":
        parts["pos-embed"][:] = e.position_embedding.weight
    elif kind == "vit":
        parts["pos-embed"][:] = e.position_embeddings[0]
    else:  # transformers' own interpolation of the position embeddings to this grid
        grid = e.interpolate_pos_encoding(
            zeros[None, : 1 + patches.shape[0]], pixels.shape[2], pixels.shape[3]
        )[0]
        parts["pos-embed"][0] = grid[0]
        parts["pos-embed"][1 + registers :] = grid[1:]
        parts["register-tokens"] = zeros.clone()
        parts["register-tokens"][1 : 1 + registers] = e.register_tokens[0]
    return parts


@torch.no_grad()
def _hand_run(kind: str, model, pixels):
    """The encoder by hand: per block its input x, LN1's 1/s, the heads' outputs (head, pos,
    d_head), scores (head, pos, pos), and every component's write into the stream entering each
    later block (name -> (pos, d_model)); the writes checked against eager below."""
    body, blocks = _parts(kind, model)
    parts = _embedding_parts(kind, body, pixels)
    x = body.embeddings(pixels)[0]
    if kind == "clip_vision":
        x, inv = _norm(x, body.pre_layrnorm)
        g = body.pre_layrnorm.weight
        parts = {n: g * (p - p.mean(-1, keepdim=True)) * inv for n, p in parts.items()}
    writes = dict(parts)
    layers = []
    tokens = x.shape[0]
    for index, (norm1, attention, o, lam1, norm2, mlp, lam2) in enumerate(blocks):
        h, inv1 = _norm(x, norm1)
        q, k, v = (
            m(h).view(tokens, HEADS, D_HEAD).transpose(0, 1)
            for m in (attention.q_proj, attention.k_proj, attention.v_proj)
        )
        scores = q @ k.transpose(-1, -2) / math.sqrt(D_HEAD)
        heads = torch.softmax(scores, -1) @ v
        layers.append({"x": x, "inv1": inv1, "scores": scores, "writes": dict(writes)})
        for head in range(HEADS):
            w = o.weight[:, head * D_HEAD : (head + 1) * D_HEAD]
            writes[f"{index}.{head}"] = lam1 * (heads[head] @ w.t())
        x = x + lam1 * o(heads.transpose(0, 1).reshape(tokens, -1))
        out = mlp(norm2(x))
        writes[f"mlp.{index}"] = lam2 * out
        x = x + lam2 * out
    return layers


def test_the_hand_forward_is_eager(case):
    _, eager, pixels, sides, layers = case
    with torch.no_grad():
        out = eager(pixel_values=pixels, output_hidden_states=True, output_attentions=True)
    for index, layer in enumerate(layers):
        # eager takes its softmax in float32: its stream and weights differ by that rounding
        assert torch.allclose(out.hidden_states[index][0], layer["x"], atol=1e-6, rtol=0)
        weights = torch.softmax(layer["scores"], -1)
        assert torch.allclose(out.attentions[index][0], weights, atol=1e-7, rtol=0)
        # and headlab's run of the same weights keeps the same stream
        assert torch.allclose(sides.cache.resid[index][0], layer["x"], atol=1e-12, rtol=0)


@pytest.mark.parametrize("layer", range(LAYERS))
def test_the_terms_sum_to_the_eager_score(case, layer):
    _, _, _, sides, layers = case
    tokens = layers[0]["x"].shape[0]
    queries = [0, tokens // 2, tokens - 1]  # the class token, a patch, the last patch
    head = (layer + 2) % HEADS
    result = split_scores(sides, layer, head, queries, KeySpec.parse("all"), sources=2)
    assert len(result.pairs) == len(queries) * tokens  # no causal mask: every key
    reference = layers[layer]["scores"][head]
    for pair in result.pairs:
        want = float(reference[pair.query, pair.key])
        assert abs(pair.raw - want) <= 1e-10
        assert abs(sum(pair.key_marginal) - want) <= 1e-10
        assert abs(sum(pair.query_marginal) - want) <= 1e-10
        assert abs(sum(map(sum, pair.pair)) - want) <= 1e-10
        by_name = dict(zip(result.components, pair.key_marginal, strict=False))
        for split in pair.sources:  # every position is a source of an encoder's head
            assert split.positions == list(range(tokens))
            assert abs(sum(split.values) - by_name[split.component]) <= 1e-10


def _knocked(kind, eager, layers, layer, head, query, key, write):
    """The reference score with ``write`` taken out of the key's stream only, LayerNorm 1 held
    at the real stream's scale, then the key projection."""
    _, blocks = _parts(kind, eager)
    norm1, attention = blocks[layer][0], blocks[layer][1]
    x, inv = layers[layer]["x"][key], layers[layer]["inv1"][key]
    y = x - write
    h = norm1.weight * (y - y.mean()) * inv + norm1.bias
    k = attention.k_proj(h).view(HEADS, D_HEAD)[head]
    q_in, _ = _norm(layers[layer]["x"][query], norm1)
    q = attention.q_proj(q_in).view(HEADS, D_HEAD)[head]
    return float(q @ k) / math.sqrt(D_HEAD)


def test_taking_a_component_out_of_the_key_moves_the_score_by_its_term(case):
    kind, eager, _, sides, layers = case
    layer, head, query = 2, 3, 0  # the class token's query
    tokens = layers[0]["x"].shape[0]
    first_patch = 5 if kind.startswith("dinov2") else 1
    keys = [0, first_patch + 2, tokens - 1] + ([2] if kind.startswith("dinov2") else [])
    result = split_scores(sides, layer, head, [query], KeySpec.at(keys, "chosen"), sources=0)
    writes = layers[layer]["writes"]
    names = [n for n in result.components if n in writes]
    assert set(names) == set(writes)  # every component but the constants, built by hand
    with torch.no_grad():
        for pair in result.pairs:
            score = float(layers[layer]["scores"][head, query, pair.key])
            for name in names:
                if not bool(writes[name][pair.key].abs().max() > 0):
                    continue  # (the class token at a patch: nothing to take out)
                moved = score - _knocked(
                    kind, eager, layers, layer, head, query, pair.key, writes[name][pair.key]
                )
                term = pair.key_marginal[result.components.index(name)]
                assert abs(moved - term) <= 1e-10, (name, pair.key)


def test_image_keys_resolve_on_the_layout(case):
    _, _, _, sides, _ = case
    layout = sides.runner.model.layout
    assert ImageKeys.parse("cls").resolve(layout).positions == (0,)
    assert ImageKeys.parse("patch-2").resolve(layout).positions == (layout.first_patch + 2,)
    if layout.registers:
        assert ImageKeys.parse("registers").resolve(layout).positions == (1, 2, 3, 4)
    else:
        with pytest.raises(ValueError, match="no register tokens"):
            ImageKeys.parse("registers").resolve(layout)
    with pytest.raises(ValueError, match="patch-N"):
        ImageKeys.parse("patch-99").resolve(layout)


@pytest.mark.parametrize("word", ["induction", "previous", "bos", "top-0", "patch-x", "sink"])
def test_image_keys_refuse_in_one_line(word):
    with pytest.raises(ValueError) as caught:
        ImageKeys.parse(word)
    assert "\n" not in str(caught.value)


def test_the_branch_scales_read_from_the_blocks_are_the_layer_scales(case):
    """DINOv2's layer scales, read by running each block (no parameter named), are the modules'
    own lambda1 vectors; ViT and CLIP have none (ones)."""
    kind, eager, _, sides, _ = case
    _, blocks = _parts(kind, eager)
    for index, block in enumerate(blocks):
        on_heads, on_mlp = sides.branch_scales(index)
        for got, want in ((on_heads, block[3]), (on_mlp, block[6])):
            want = torch.as_tensor(want, dtype=got.dtype).expand_as(got)
            assert torch.allclose(got, want, atol=1e-10, rtol=0)
    layer = LAYERS - 1
    sides.writes(layer, slice(0, 3))
    scaled = kind.startswith("dinov2")  # the formula with the scales, not the carried writes
    assert sides.scaled is scaled and sides.direct is (not scaled)

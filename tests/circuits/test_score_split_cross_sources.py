"""A cross-attention's key side split by the source position each encoder head read
(``score_cross.cross_source_terms``), on the random float64 T5, BART and Whisper of
tiny_seq2seq.py, against references built by hand from the eager model's own modules.

Encoder head H of block M writes at source position j the sum over t of w_jt v_t W_O(H)^T. Its
key-side term at j is the sum of the sources' terms, so:

- **The sources sum to the head's key-side term** (the key marginal's entry) within 1e-10.
- **Each source's part is that write pushed through the same maps, by hand**: w_jt (the eager
  encoder's ``attentions``) times v_t (the eager v projection of the attention's own input)
  through the head's slice of W_O; then the norms between the write and the cross-attention,
  each held at the eager run's scale at j (T5: the final RMSNorm, its variance in float32 as T5
  computes it; Whisper: the final LayerNorm; BART, post-norm: every LayerNorm from block M's on,
  no final norm); then k's linear part (k_proj(x) - k_proj(0)), dotted with the eager query's
  scaled q. Within 1e-10.
"""

import pytest
import torch
from tiny_seq2seq import eager_inputs, head_slice, module_heads, projections, tiny_models

from headlab.circuits.score_cross import CrossSides, split_cross_scores
from headlab.circuits.score_keys import KeySpec


@pytest.fixture(scope="module", params=["t5", "bart", "whisper"])
def built(request):
    eager, seq2seq, source, target = tiny_models(request.param)
    return request.param, eager, source, target, CrossSides(seq2seq, source, target)


def _self_attention(kind: str, encoder, m: int):
    return encoder.block[m].layer[0].SelfAttention if kind == "t5" else encoder.layers[m].self_attn


def _held_norms(kind: str, encoder, m: int) -> list:
    """The norms a write of encoder block ``m``'s attention passes on its way to the
    cross-attention's k, in order."""
    if kind == "t5":
        return [encoder.final_layer_norm]
    if kind == "whisper":
        return [encoder.layer_norm]
    norms = []
    for block in encoder.layers[m:]:  # BART: x' = LN(x + attn), then LN(x' + mlp)
        norms += [block.self_attn_layer_norm, block.final_layer_norm]
    return norms


def _eager_encoder(kind: str, encoder, source, m: int):
    """(attention weights of block ``m`` (head, source pos, source pos), the input its
    self-attention reads (source pos, d_model), each held norm's input (source pos, d_model))."""
    attention = _self_attention(kind, encoder, m)
    norms = _held_norms(kind, encoder, m)
    seen: dict = {"norms": [None] * len(norms)}

    def keep_input(_module, args, kwargs):
        seen.setdefault("h", args[0] if args else kwargs["hidden_states"])

    def keeping(n):
        def hook(_module, args):
            seen["norms"][n] = args[0][0]

        return hook

    handles = [attention.register_forward_pre_hook(keep_input, with_kwargs=True)]
    handles += [norm.register_forward_pre_hook(keeping(n)) for n, norm in enumerate(norms)]
    try:
        with torch.no_grad():
            out = encoder(**source.inputs, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return out.attentions[m][0], seen["h"][0], list(zip(norms, seen["norms"], strict=True))


def _by_hand(kind, eager, source, name: str, key: int) -> torch.Tensor:
    """(source pos, d_model): each source's part of encoder head ``name``'s ("enc.M.H") write at
    ``key``, through the held norms: what the cross-attention's k map reads."""
    m, h = (int(x) for x in name.removeprefix("enc.").split("."))
    encoder = eager.get_encoder()
    weights, hidden, held = _eager_encoder(kind, encoder, source, m)
    attention = _self_attention(kind, encoder, m)
    v_proj, o_proj = (
        (attention.v, attention.o) if kind == "t5" else (attention.v_proj, attention.out_proj)
    )
    width = v_proj.weight.shape[0] // module_heads(attention)
    with torch.no_grad():
        v = head_slice(v_proj(hidden), h, width)  # (source pos, d_head)
        slice_o = head_slice(o_proj.weight, h, width)  # (d_model, d_head)
        x = weights[h, key, :, None] * v @ slice_o.t()  # (source pos, d_model)
        for norm, stream in held:
            at = stream[key]
            if kind == "t5":  # RMSNorm, its variance in float32 as T5 computes it
                variance = at.to(torch.float32).pow(2).mean(-1, keepdim=True)
                x = norm.weight * x * torch.rsqrt(variance + norm.variance_epsilon)
            else:
                s = (at.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
                x = norm.weight * (x - x.mean(-1, keepdim=True)) / s
    return x


@pytest.mark.parametrize(("layer", "head", "query"), [(1, 2, 6), (2, 0, 9)])
def test_encoder_heads_split_by_source_match_the_hand_built_parts(built, layer, head, query):
    kind, eager, source, target, sides = built
    with torch.no_grad():  # as the command runs it
        result = split_cross_scores(sides, layer, head, [query], KeySpec.parse("top-2"), sources=3)
    module, h, _, _ = eager_inputs(eager, kind, layer, source, target)
    q_proj, k_proj = projections(module)
    width = q_proj.weight.shape[0] // module_heads(module)
    with torch.no_grad():
        q = module.scaling * head_slice(q_proj(h[query]), head, width)  # (d_head,)
    length = source.mask.shape[1]
    checked = 0
    for pair in result.pairs:
        assert len(pair.sources) == 3
        for split in pair.sources:
            assert split.component.startswith("enc.") and "mlp" not in split.component
            assert split.positions == list(range(length))  # an encoder reads every position
            term = pair.key_marginal[result.key_components.index(split.component)]
            assert abs(sum(split.values) - term) <= 1e-10
            x = _by_hand(kind, eager, source, split.component, pair.key)
            with torch.no_grad():
                k = head_slice(k_proj(x) - k_proj(torch.zeros_like(x[:1])), head, width)
            want = (k @ q).tolist()  # (source pos,)
            assert max(abs(a - b) for a, b in zip(split.values, want, strict=True)) <= 1e-10
            assert max(map(abs, want)) > 1e-6
            checked += 1
    assert checked == 3 * len(result.pairs) == 6


def test_no_split_asked_gives_none(built):
    *_, sides = built
    result = split_cross_scores(sides, 0, 1, [2], KeySpec.parse("attended"), sources=0)
    assert result.pairs and all(not pair.sources for pair in result.pairs)

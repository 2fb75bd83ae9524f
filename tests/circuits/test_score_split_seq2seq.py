"""The score split of an encoder-decoder's cross-attention (``score_cross.py``), on random T5,
BART and Whisper models that transformers builds, in float64, against transformers' own eager
model.

- **The terms sum to the eager model's pre-softmax score.** The reference is built by hand from
  the eager cross-attention module's own inputs (its query stream and the encoder's final
  states, read by a hook) and weights: ``scaling * q_proj(h) . k_proj(states)``, checked to give
  the eager model's ``cross_attentions`` through a softmax. The pair matrix, each marginal, and
  the kernel's score (T5, BART, Whisper: no position bias in the cross-attention, so the bias
  term is zero) each equal it within 1e-10.
- **Taking one encoder component out of the key input only moves the score by its term.** The
  write is taken out of the encoder's last stream at the key, the final norm applied by hand at
  the real stream's scale (T5's RMSNorm, its variance in float32 as T5 computes it; Whisper's
  LayerNorm), then k. BART has no final norm; its last block's MLP write leaves the block
  through that block's post-norm, applied by hand at the real scale.

The models are tiny_seq2seq.py's: sizes distinct where the family allows (d_model 35: 5 encoder
heads of 7, 7 decoder heads of 5; Whisper, whose sinusoidal positions need an even width,
d_model 42: 7 encoder heads of 6, 6 decoder heads of 7; FFN 37 and 41; 7 source tokens, 11
target tokens; Whisper 13 source positions from 11 mel bins).
"""

import pytest
import torch
from tiny_seq2seq import (
    eager_inputs,
    head_slice,
    module_heads,
    projections,
    self_attention_input,
    tiny_models,
)

from headlab.circuits.score_cross import CrossSides, split_cross_scores
from headlab.circuits.score_keys import KeySpec


@pytest.fixture(scope="module", params=["t5", "bart", "whisper"])
def built(request):
    eager, seq2seq, source, target = tiny_models(request.param)
    return request.param, eager, source, target, CrossSides(seq2seq, source, target)


@pytest.mark.parametrize(("layer", "head"), [(0, 0), (2, 3)])
def test_cross_terms_sum_to_the_eager_score(built, layer, head):
    kind, eager, source, target, sides = built
    result = split_cross_scores(sides, layer, head, [3, 9], KeySpec.parse("all"))
    length = source.mask.shape[1]
    assert len(result.pairs) == 2 * length  # every source position, for each query
    assert result.attention == "cross"
    assert result.key_components[0] == "enc.embed" and "enc.mlp.1" in result.key_components
    assert f"{layer}.{head}" in result.components  # the block's own self-attention heads
    module, h, kv, out = eager_inputs(eager, kind, layer, source, target)
    q_proj, k_proj = projections(module)
    width = q_proj.weight.shape[0] // module_heads(module)
    with torch.no_grad():
        q = head_slice(q_proj(h), head, width)  # (pos, d_head)
        k = head_slice(k_proj(kv), head, width)  # (source pos, d_head)
        reference = module.scaling * q @ k.t()  # (pos, source pos)
    weights = out.cross_attentions[layer][0, head]
    assert torch.allclose(reference.softmax(-1), weights, atol=1e-12, rtol=0)
    assert float(reference.abs().max()) > 1e-2
    for pair in result.pairs:
        want = float(reference[pair.query, pair.key])
        assert abs(pair.raw - want) <= 1e-10
        assert abs(sum(pair.key_marginal) - want) <= 1e-10
        assert abs(sum(pair.query_marginal) - want) <= 1e-10
        assert abs(sum(map(sum, pair.pair)) - want) <= 1e-10
        assert abs(pair.score - want) <= 1e-10 and abs(pair.bias_term) <= 1e-10


def test_the_key_side_a_few_components_at_a_time_is_the_same(built, monkeypatch):
    """The key side's copies run a few components at a time (``COPIES_BUDGET``) and keys far
    apart run apart (``position_runs``): one component and one key at a time gives the same
    terms."""
    import headlab.circuits.score_cross as score_cross

    *_, sides = built
    whole = split_cross_scores(sides, 1, 1, [4], KeySpec.parse("all"))
    monkeypatch.setattr(score_cross, "COPIES_BUDGET", 1)
    monkeypatch.setattr(score_cross, "position_runs", lambda ps: [slice(p, p + 1) for p in ps])
    apart = split_cross_scores(sides, 1, 1, [4], KeySpec.parse("top-2"))
    for pair in apart.pairs:
        want = whole.pairs[pair.key]
        gaps = [abs(a - b) for a, b in zip(pair.key_marginal, want.key_marginal, strict=True)]
        assert max(gaps) <= 1e-12 and abs(pair.score - want.score) <= 1e-12


def _encoder_writes(kind: str, eager, sides, source) -> tuple[torch.Tensor, dict]:
    """(the encoder's stream leaving its last block (source pos, d_model), and some components'
    writes there, by name, each read from the eager encoder's own run (hooks) or carried by
    hand)."""
    encoder = eager.get_encoder()
    blocks = encoder.block if kind == "t5" else encoder.layers
    last = blocks[-1]
    seen = {}

    def keeping(name):
        def hook(_module, args, output):
            seen[name] = (args[0][0], output[0] if isinstance(output, torch.Tensor) else None)

        return hook

    if kind == "t5":
        watched = last.layer[1].DenseReluDense  # its output: the MLP's write
    else:  # Whisper's fc2 (the MLP's write); BART's post-norm after it (its input y)
        watched = last.fc2 if kind == "whisper" else last.final_layer_norm
    handles = [watched.register_forward_hook(keeping("mlp"))]
    if kind != "bart":
        final = encoder.final_layer_norm if kind == "t5" else encoder.layer_norm
        handles.append(final.register_forward_hook(keeping("final")))
    try:
        with torch.no_grad():
            out = encoder(**source.inputs, output_hidden_states=True)
    finally:
        for handle in handles:
            handle.remove()
    if kind == "bart":  # post-norm: x' = LN(y), y = a + mlp; the MLP's write is g * C(mlp) / s
        y = seen["mlp"][0]
        norm = last.final_layer_norm
        s = (y.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        mlp = sides.keys.cache.mlp[len(blocks) - 1][0]
        write = norm.weight * (mlp - mlp.mean(-1, keepdim=True)) / s
        return out.last_hidden_state[0], {f"enc.mlp.{len(blocks) - 1}": write}
    stream = seen["final"][0]
    attention = blocks[0].layer[0].SelfAttention if kind == "t5" else blocks[0].self_attn
    w_o = attention.o.weight if kind == "t5" else attention.out_proj.weight
    width = w_o.shape[1] // module_heads(attention)
    head_write = sides.keys.cache.head_outputs[0][0, 3] @ w_o[:, 3 * width : 4 * width].t()
    return stream, {
        "enc.embed": out.hidden_states[0][0],
        f"enc.mlp.{len(blocks) - 1}": seen["mlp"][1],
        "enc.0.3": head_write,
    }


def test_taking_an_encoder_component_out_of_the_key_moves_the_score_by_its_term(built):
    kind, eager, source, target, sides = built
    layer, head, query = 1, 2, 6
    result = split_cross_scores(sides, layer, head, [query], KeySpec.parse("all"))
    module, h, kv, _ = eager_inputs(eager, kind, layer, source, target)
    q_proj, k_proj = projections(module)
    width = q_proj.weight.shape[0] // module_heads(module)
    stream, writes = _encoder_writes(kind, eager, sides, source)
    encoder = eager.get_encoder()
    with torch.no_grad():
        q = module.scaling * head_slice(q_proj(h[query]), head, width)

        def key_input(x):  # the encoder's last stream -> its final states, the norm held
            if kind == "bart":  # no final norm
                return x
            if kind == "t5":  # RMSNorm, its variance in float32 as T5 computes it
                norm = encoder.final_layer_norm
                variance = stream.to(torch.float32).pow(2).mean(-1, keepdim=True)
                return norm.weight * x * torch.rsqrt(variance + norm.variance_epsilon)
            norm = encoder.layer_norm
            s = (stream.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
            return norm.weight * (x - x.mean(-1, keepdim=True)) / s + norm.bias

        def score(x, key):
            return float(q @ head_slice(k_proj(key_input(x)), head, width)[key])

        assert torch.allclose(key_input(stream), kv, atol=1e-12, rtol=0)
        for name, write in writes.items():
            index = result.key_components.index(name)
            for key in (0, 4):
                moved = score(stream, key) - score(stream - write, key)
                term = result.pairs[key].key_marginal[index]
                assert abs(moved - term) <= 1e-10
                assert abs(term) > 1e-8


def _self_scores(module, h: torch.Tensor, head: int) -> torch.Tensor:
    """(q_pos, k_pos) scaling * q . k of ``head``, by hand from the module's weights."""
    q_proj, k_proj = projections(module)
    width = q_proj.weight.shape[0] // module_heads(module)
    with torch.no_grad():
        q, k = head_slice(q_proj(h), head, width), head_slice(k_proj(h), head, width)
        return module.scaling * q @ k.t()


def test_an_encoder_read_from_the_loaded_encoder_decoder(built):
    """The encoder's self-attention (``EncoderStream``): the terms sum to the eager encoder's
    q.k, and q.k plus T5's own relative bias (zero elsewhere) is the kernel's score."""
    kind, eager, source, _, sides = built
    layer, head = 1, 3
    encoder = eager.get_encoder()
    block = encoder.block[layer].layer[0] if kind == "t5" else encoder.layers[layer]
    module = block.SelfAttention if kind == "t5" else block.self_attn
    h = self_attention_input(module, lambda: encoder(**source.inputs))
    reference = _self_scores(module, h, head)
    length = source.mask.shape[1]
    bias = torch.zeros(length, length, dtype=torch.float64)
    if kind == "t5":
        with torch.no_grad():
            bias = encoder.block[0].layer[0].SelfAttention.compute_bias(length, length)[0, head]
    from headlab.circuits.score_split import split_scores

    result = split_scores(sides.keys, layer, head, [2, length - 1], KeySpec.parse("all"))
    assert len(result.pairs) == 2 * length  # an encoder: keys after the query too
    # a few positions run alone (Whisper: the window runs, the given stream stands for them)
    few = split_scores(sides.keys, layer, head, [3], KeySpec.parse("4"), sources=0).pairs
    assert abs(few[0].raw - float(reference[3, 4])) <= 1e-10
    assert sides.keys.direct is (kind != "bart")  # BART's encoder is post-norm
    for pair in result.pairs:
        assert abs(pair.raw - float(reference[pair.query, pair.key])) <= 1e-10
        assert abs(sum(pair.key_marginal) - pair.raw) <= 1e-10
        assert abs(pair.raw + float(bias[pair.query, pair.key]) - pair.score) <= 1e-10


def test_bart_decoder_self_attention_is_split_through_its_post_norms():
    """BART's decoder (``DecoderStream``): post-norm blocks, learned positions (offset 2) added
    before the first block, a causal mask. The terms sum to the eager self-attention's q.k at
    every key up to the query, which is the kernel's score there."""
    from headlab.circuits.score_sides import Sides
    from headlab.circuits.score_split import split_scores
    from headlab.models.hf.seq2seq_view import DecoderStream

    eager, seq2seq, source, target = tiny_models("bart")
    sides = Sides(DecoderStream(seq2seq, source), target)
    layer, head, queries = 2, 4, [5, 9]
    module = eager.get_decoder().layers[layer].self_attn
    h = self_attention_input(
        module, lambda: eager(**source.inputs, decoder_input_ids=target, use_cache=False)
    )
    reference = _self_scores(module, h, head)
    result = split_scores(sides, layer, head, queries, KeySpec.parse("all"), sources=0)
    assert not sides.direct  # the writes are carried through the post-norms
    assert len(result.pairs) == sum(q + 1 for q in queries)  # causal
    split = split_scores(sides, layer, head, [9], KeySpec.parse("attended"), sources=2)
    assert split.pairs[0].sources
    for pair in [*result.pairs, *split.pairs]:
        assert abs(pair.raw - float(reference[pair.query, pair.key])) <= 1e-10
        assert abs(sum(pair.key_marginal) - pair.raw) <= 1e-10
        assert abs(pair.score - pair.raw) <= 1e-10
        for split in pair.sources:
            term = pair.key_marginal[result.components.index(split.component)]
            assert abs(sum(split.values) - term) <= 1e-10

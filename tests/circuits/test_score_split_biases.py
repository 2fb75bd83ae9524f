"""The score split of families whose score has a position bias, against the family's own bias.

- T5's relative position bias (an encoder: ``T5EncoderModel``, pre-norm RMSNorm, no score
  scaling): the pair matrix sums to q.k, and q.k plus the bias that T5's own ``compute_bias``
  gives for (query, key) is the kernel's score within 1e-10 in float64.
- T5's decoder stream (``DecoderStream``: an encoder-decoder's decoder for one source): its
  self-attention's terms, with the cross-attention heads' writes among the components, and the
  causal relative bias; and one cross head's term against a hand-built key without its write.
- Falcon with ALiBi (``alibi=True``: its model folds the bias into the attention mask): the same,
  with the bias from transformers' ``build_alibi_tensor`` scaled as Falcon scales it.

Sizes are distinct (5 heads of 7 in T5, 5 of 6 in Falcon, FFN 37, 3 layers, 11 tokens).
"""

import math

import pytest
import torch
import transformers
from transformers.models.falcon.modeling_falcon import build_alibi_tensor

from headlab.circuits.score_keys import KeySpec
from headlab.circuits.score_sides import Sides
from headlab.circuits.score_split import split_scores
from headlab.models.hf import attach

LENGTH, VOCAB = 11, 53


def _random(model):
    torch.manual_seed(7)
    with torch.no_grad():  # the init's constant norms and biases become random
        for parameter in model.parameters():
            if parameter.ndim == 1:
                parameter.normal_(0.3, 0.4)
    return attach(model.double().eval(), announce=False)


def _ids():
    return torch.randint(1, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(4))


def _check(result, bias):
    """Every pair: the terms sum to q.k, and q.k plus the family's bias is the kernel's score."""
    assert result.pairs
    for pair in result.pairs:
        assert abs(sum(pair.key_marginal) - pair.raw) <= 1e-10
        assert abs(sum(pair.query_marginal) - pair.raw) <= 1e-10
        assert abs(pair.raw + float(bias[pair.query, pair.key]) - pair.score) <= 1e-10
    assert max(abs(float(bias[p.query, p.key])) for p in result.pairs) > 1e-3


@pytest.fixture(scope="module")
def t5():
    torch.manual_seed(3)
    config = transformers.T5Config(
        vocab_size=VOCAB,
        d_model=35,
        d_kv=7,
        d_ff=37,
        num_layers=3,
        num_heads=5,
        relative_attention_num_buckets=8,
    )
    return _random(transformers.T5EncoderModel(config))


@pytest.mark.parametrize(("layer", "head"), [(0, 0), (2, 3)])
def test_t5_relative_bias_is_the_bias_term(t5, layer, head):
    sides = Sides(t5, _ids())
    result = split_scores(sides, layer, head, [2, 8], KeySpec.parse("all"), sources=1)
    assert len(result.pairs) == 2 * LENGTH  # an encoder: keys after the query too
    first = t5.model.encoder.block[0].layer[0].SelfAttention
    with torch.no_grad():
        bias = first.compute_bias(LENGTH, LENGTH)[0, head]  # (q_pos, k_pos)
    _check(result, bias)
    if layer > 0:
        assert all(pair.sources for pair in result.pairs)


def _falcon_config():
    return transformers.FalconConfig(
        vocab_size=VOCAB,
        hidden_size=30,
        num_attention_heads=5,
        num_hidden_layers=3,
        alibi=True,
        new_decoder_architecture=False,
        multi_query=False,
        parallel_attn=True,
        bias=True,
    )


def test_falcon_alibi_is_the_bias_term():
    torch.manual_seed(3)
    model = _random(transformers.FalconForCausalLM(_falcon_config()))
    sides = Sides(model, _ids())
    head = 2
    result = split_scores(sides, 2, head, [6, 10], KeySpec.parse("all"), sources=1)
    mask = torch.ones(1, LENGTH, dtype=torch.long)
    alibi = build_alibi_tensor(mask, 5, torch.float64)[head, 0] / math.sqrt(6)  # (k_pos,)
    _check(result, alibi.expand(LENGTH, LENGTH))
    # the at-length views read q . k alone, whose highest is not ALiBi's: refused, not misread
    from headlab.circuits.score_marginals import attended_marginals

    with pytest.raises(ValueError, match="ALiBi"):
        attended_marginals(sides, 2, 0.3)


def test_long_texts_read_q_k_alone_so_a_bias_or_a_window_is_refused(monkeypatch):
    """Past ``KERNEL_SCORES_UP_TO`` tokens the split reads scale * q . k: the same pairs as the
    kernel's scores where the family adds nothing (Llama), a one-line refusal where it adds a
    bias (Falcon's ALiBi, T5's relative bias) or masks a window (Mistral's, from its config)."""
    from hf_families import build

    from headlab.circuits import score_split

    def split(model, layer, head):
        sides = Sides(model, _ids())
        return split_scores(sides, layer, head, [LENGTH - 1], KeySpec.parse("top-3"))

    models = {name: attach(build(name).double(), announce=False) for name in ("llama", "mistral")}
    torch.manual_seed(3)
    models["falcon"] = _random(transformers.FalconForCausalLM(_falcon_config()))
    short = split(models["llama"], 1, 2)
    monkeypatch.setattr(score_split, "KERNEL_SCORES_UP_TO", 4)
    long = split(models["llama"], 1, 2)
    assert [p.key for p in long.pairs] == [p.key for p in short.pairs]
    for a, b in zip(long.pairs, short.pairs, strict=True):
        assert a.score is None and abs(a.raw - b.raw) <= 1e-10  # no kernel score read
        assert max(abs(x - y) for x, y in zip(a.key_marginal, b.key_marginal, strict=True)) <= 1e-10
    with pytest.raises(ValueError, match=r"adds a bias to q \. k"):
        split(models["falcon"], 2, 2)
    with pytest.raises(ValueError, match="sliding window of 4"):
        split(models["mistral"], 1, 0)


@pytest.fixture(scope="module")
def t5_decoder():
    """A random T5 encoder-decoder's decoder stream (``DecoderStream``) for one source, with
    the eager model of the same weights (tiny_seq2seq.py)."""
    from tiny_seq2seq import tiny_models

    from headlab.models.hf.seq2seq_view import DecoderStream

    eager, seq2seq, source, target = tiny_models("t5")
    return eager, DecoderStream(seq2seq, source), target


def test_t5_decoder_self_attention_splits_with_its_relative_bias(t5_decoder):
    """The decoder's self-attention: its stream is the sum of the embeddings, each earlier
    block's self- and cross-attention heads and MLP; the terms sum to q.k, and q.k plus T5's
    own causal relative bias is the kernel's score."""
    model, view, ids = t5_decoder
    sides = Sides(view, ids)
    layer, head, length = 2, 1, ids.shape[1]
    writes = sides.writes(layer, slice(0, length))
    assert sides.direct
    assert "1.x4" in sides.components(layer)
    stream = sides.cache.resid[layer]
    assert float((writes.sum(0) - stream).abs().max()) <= 1e-10
    result = split_scores(sides, layer, head, [4, 9], KeySpec.parse("all"), sources=1)
    assert len(result.pairs) == 5 + 10  # causal: keys up to the query
    first = model.decoder.block[0].layer[0].SelfAttention
    with torch.no_grad():
        bias = first.compute_bias(length, length)[0, head]
    _check(result, bias)


def test_t5_taking_a_cross_head_out_of_the_key_moves_the_score_by_its_term(t5_decoder):
    """By hand: the cross-attention head's write (its output through its slice of W_O) taken
    out of the key position's stream, T5's RMSNorm at the real stream's scale (its variance in
    float32, as T5 computes it), then k."""
    model, view, ids = t5_decoder
    sides = Sides(view, ids)
    layer, head, query, key, name = 2, 3, 8, 5, "1.x2"
    (pair,) = split_scores(sides, layer, head, [query], KeySpec.parse(str(key))).pairs
    block = model.decoder.block[layer].layer[0]
    cross = model.decoder.block[1].layer[1].EncDecAttention
    x = sides.cache.resid[layer][0]  # (pos, d_model)
    cut = slice(2 * 7, 3 * 7)
    write = sides.cache.cross[1][0, 2] @ cross.o.weight[:, cut].t()  # (pos, d_model)
    norm = block.layer_norm
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)  # T5 takes it in float32
    inv = torch.rsqrt(variance + norm.variance_epsilon)
    cut = slice(head * 7, (head + 1) * 7)
    with torch.no_grad():
        q = block.SelfAttention.q(norm.weight * x[query] * inv[query])[cut]

        def score(row):
            return float(q @ block.SelfAttention.k(norm.weight * row * inv[key])[cut])

        moved = score(x[key]) - score(x[key] - write[key])
    term = pair.key_marginal[sides.components(layer).index(name)]
    assert abs(moved - term) <= 1e-10
    assert abs(term) > 1e-6

"""The score split of families whose score has a position bias, against the family's own bias.

- T5's relative position bias (an encoder: ``T5EncoderModel``, pre-norm RMSNorm, no score
  scaling): the pair matrix sums to q.k, and q.k plus the bias that T5's own ``compute_bias``
  gives for (query, key) is the kernel's score within 1e-10 in float64.
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


def test_falcon_alibi_is_the_bias_term():
    torch.manual_seed(3)
    config = transformers.FalconConfig(
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
    model = _random(transformers.FalconForCausalLM(config))
    sides = Sides(model, _ids())
    head = 2
    result = split_scores(sides, 2, head, [6, 10], KeySpec.parse("all"), sources=1)
    mask = torch.ones(1, LENGTH, dtype=torch.long)
    alibi = build_alibi_tensor(mask, 5, torch.float64)[head, 0] / math.sqrt(6)  # (k_pos,)
    _check(result, alibi.expand(LENGTH, LENGTH))

"""The score split of a post-norm encoder (BERT, as MiniLM is) against a BERT written by hand.

A post-norm block is ``x' = LN2(a + mlp(a))`` with ``a = LN1(x + attn(x))``. With each
LayerNorm held at this run's scale s (its mean-centring C is linear), the block is affine, and
every write that entered it leaves it as ``g2 * C(g1 * C(write) / s1) / s2``. The reference here
recomputes the whole forward with torch ops from the module's weights (float64), carries a
component's write through the later norms at their real scales by hand, takes it out of the key
input only and compares the score's change with the split's key-side term. Sizes are distinct
primes where BERT allows (5 heads of 7, FFN 37, 3 layers, 13 tokens, vocabulary 53).
"""

import math

import pytest
import torch
import transformers

from headlab.circuits.score_keys import KeySpec
from headlab.circuits.score_profiles import key_profiles
from headlab.circuits.score_sides import Sides
from headlab.circuits.score_split import split_scores
from headlab.models.hf import attach

HEADS, D_HEAD, LAYERS, LENGTH = 5, 7, 3, 13


@pytest.fixture(scope="module")
def bert():
    config = transformers.BertConfig(
        vocab_size=53,
        hidden_size=HEADS * D_HEAD,
        num_attention_heads=HEADS,
        num_hidden_layers=LAYERS,
        intermediate_size=37,
        max_position_embeddings=31,
        type_vocab_size=2,
    )
    torch.manual_seed(11)
    model = transformers.BertModel(config).eval()
    with torch.no_grad():  # the init's constant norms and biases become random
        for parameter in model.parameters():
            if parameter.ndim == 1:
                parameter.normal_(0.3, 0.4)
    model = model.double()
    ids = torch.randint(1, 53, (1, LENGTH), generator=torch.Generator().manual_seed(2))
    return model, attach(model, announce=False), ids


def _norm(y, norm):
    """LayerNorm by hand: (output, 1 / scale) (rows, 1)."""
    centred = y - y.mean(-1, keepdim=True)
    inv = 1 / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + norm.eps)
    return norm.weight * centred * inv + norm.bias, inv


@torch.no_grad()
def _hand_run(model, ids):
    """The encoder's forward by hand (float64): per layer its input x (pos, d_model), its
    heads' outputs (head, pos, d_head), MLP output, and the two norms' (g, 1/s)."""
    x = model.embeddings(ids)[0]
    layers = []
    for layer in model.encoder.layer:
        attention = layer.attention
        q, k, v = (
            m(x).view(LENGTH, HEADS, D_HEAD).transpose(0, 1)
            for m in (attention.self.query, attention.self.key, attention.self.value)
        )
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D_HEAD), -1)
        heads = weights @ v  # (head, pos, d_head)
        attn = attention.output.dense(heads.transpose(0, 1).reshape(LENGTH, -1))
        a, inv1 = _norm(x + attn, attention.output.LayerNorm)
        mlp = layer.output.dense(layer.intermediate(a))
        out, inv2 = _norm(a + mlp, layer.output.LayerNorm)
        layers.append(
            {
                "x": x,
                "heads": heads,
                "mlp": mlp,
                "norms": [
                    (attention.output.LayerNorm.weight, inv1),
                    (layer.output.LayerNorm.weight, inv2),
                ],
            }
        )
        x = out
    return layers, x


def _carried(write, layers, start, stop, first_norm=0):
    """``write`` (pos, d_model) pushed through the held norms of layers start .. stop - 1 (from
    norm ``first_norm`` of layer ``start``): g * C(write) * (1/s) at each."""
    for index in range(start, stop):
        for g, inv in layers[index]["norms"][first_norm if index == start else 0 :]:
            write = g * (write - write.mean(-1, keepdim=True)) * inv
    return write


def _written(model, layers, name, layer):
    """Component ``name``'s write into the stream entering ``layer``, by hand."""
    if name == "embed":
        return _carried(layers[0]["x"], layers, 0, layer)
    if name.startswith("mlp."):
        at = int(name[4:])
        return _carried(layers[at]["mlp"], layers, at, layer, first_norm=1)
    at, head = (int(n) for n in name.split("."))
    w_o = model.encoder.layer[at].attention.output.dense.weight
    own = layers[at]["heads"][head] @ w_o[:, head * D_HEAD : (head + 1) * D_HEAD].t()
    return _carried(own, layers, at, layer)


def test_the_hand_forward_is_the_model(bert):
    model, wrapped, ids = bert
    layers, out = _hand_run(model, ids)
    sides = Sides(wrapped, ids)
    for index, layer in enumerate(layers):
        assert torch.allclose(sides.cache.resid[index][0], layer["x"], atol=1e-12, rtol=0)
    assert torch.allclose(sides.cache.resid[LAYERS][0], out, atol=1e-12, rtol=0)


@pytest.mark.parametrize("layer", range(LAYERS))
def test_terms_sum_to_the_kernel_score(bert, layer):
    _, wrapped, ids = bert
    sides = Sides(wrapped, ids)
    result = split_scores(sides, layer, 3, [2, 9], KeySpec.parse("all"), sources=0)
    assert len(result.pairs) == 2 * LENGTH  # an encoder's query sees keys after it
    for pair in result.pairs:
        assert abs(pair.raw - pair.score) <= 1e-10  # no score bias: the terms are the score
        assert abs(sum(pair.key_marginal) - pair.raw) <= 1e-10
        assert abs(sum(pair.query_marginal) - pair.raw) <= 1e-10
        assert abs(sum(map(sum, pair.pair)) - pair.raw) <= 1e-10
    result = split_scores(sides, layer, 3, [9], KeySpec.parse("top-2"), sources=2)
    for pair in result.pairs:
        assert len(pair.sources) == min(2, 3 * layer)  # the heads of the layers before
        for source in pair.sources:
            assert len(source.positions) == LENGTH
            term = pair.key_marginal[result.components.index(source.component)]
            assert abs(sum(source.values) - term) <= 1e-10


@pytest.mark.parametrize("name", ["embed", "0.1", "mlp.0", "1.4", "mlp.1"])
def test_taking_a_component_out_of_the_key_moves_the_score_by_its_term(bert, name):
    model, wrapped, ids = bert
    layers, _ = _hand_run(model, ids)
    layer, head, query, key = 2, 1, 3, 10  # a key after the query
    sides = Sides(wrapped, ids)
    result = split_scores(sides, layer, head, [query], KeySpec.parse(str(key)))
    (pair,) = result.pairs
    self_attention = model.encoder.layer[layer].attention.self
    x = layers[layer]["x"]
    cut = slice(head * D_HEAD, (head + 1) * D_HEAD)
    with torch.no_grad():
        q = self_attention.query(x[query])[cut]
    keyed = x[key] - _written(model, layers, name, layer)[key]

    @torch.no_grad()
    def score(row):
        return float(q @ self_attention.key(row)[cut]) / math.sqrt(D_HEAD)

    assert abs(score(x[key]) - pair.score) <= 1e-10
    moved = score(x[key]) - score(keyed)
    term = pair.key_marginal[result.components.index(name)]
    assert abs(moved - term) <= 1e-10
    assert abs(term) > 1e-6  # not a vacuous zero


def test_key_profiles_are_the_split_at_each_heads_key(bert):
    """key_profiles (its own batched path) against split_scores at each head's attended key, and
    the one-head view's marginal at the key the merged score sum_h s_h / sqrt(head) ranks
    first (the kernel's merge_view), keys after the query included."""
    _, wrapped, ids = bert
    layer, queries = 2, [1, 6, 12]
    sides = Sides(wrapped, ids)
    found = key_profiles(sides, layer, queries)
    scores = sides.clean_scores(layer)["scores"][0]  # (head, q_pos, k_pos)
    merged = scores.sum(0) / math.sqrt(HEADS)

    def unit(rows):
        return rows / rows.norm(dim=-1, keepdim=True)

    every = {  # (head, query, key) -> the key-side marginal
        (h, p.query, p.key): torch.tensor(p.key_marginal, dtype=torch.float64)
        for h in range(HEADS)
        for p in split_scores(sides, layer, h, queries, KeySpec.parse("all"), sources=0).pairs
    }
    own, one = [], []
    for i in queries:
        own.append(torch.stack([every[h, i, int(scores[h, i].argmax())] for h in range(HEADS)]))
        j = int(merged[i].argmax())
        one.append(sum(every[h, i, j] for h in range(HEADS)) / math.sqrt(HEADS))
    heads = unit(unit(torch.stack(own)).mean(0))  # (head, component + 1)
    one_head = unit(unit(torch.stack(one)).mean(0))
    assert torch.allclose(
        torch.tensor(found["heads"], dtype=torch.float64), heads, atol=1e-10, rtol=0
    )
    assert torch.allclose(
        torch.tensor(found["one_head"], dtype=torch.float64), one_head, atol=1e-10, rtol=0
    )
    cos = heads @ heads.t()
    within = (cos.sum() - cos.diagonal().sum()) / (HEADS * (HEADS - 1))
    assert abs(found["within"] - float(within)) <= 1e-10
    assert abs(found["to_one_head"] - float((heads @ one_head).mean())) <= 1e-10
    assert any(int(merged[i].argmax()) > i for i in queries) or any(
        int(scores[h, i].argmax()) > i for h in range(HEADS) for i in queries
    )  # an encoder's key after its query is read


@pytest.mark.model
def test_the_packaged_minilm_splits_to_its_own_scores(minilm):
    """MiniLM (float32): the last layer's terms sum to the kernel's scores, keys after the query
    included, up to float32's rounding of the carried writes."""
    ids = minilm.encode("The cat sat on the mat. The dog ran in the park.")
    sides = Sides(minilm, torch.tensor([ids]))
    result = split_scores(sides, 5, 7, [3], KeySpec.parse("all"), sources=0)
    assert len(result.pairs) == len(ids)
    size = max(abs(p.score) for p in result.pairs)
    for pair in result.pairs:
        assert abs(sum(pair.key_marginal) - pair.score) <= 1e-4 * size
        assert abs(sum(pair.query_marginal) - pair.score) <= 1e-4 * size
    (pair,) = split_scores(sides, 5, 7, [3], KeySpec.parse("attended"), sources=2).pairs
    assert len(pair.sources) == 2
    for source in pair.sources:
        term = pair.key_marginal[result.components.index(source.component)]
        assert abs(sum(source.values) - term) <= 1e-4 * size

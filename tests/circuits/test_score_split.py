"""The score split (circuits.score_sides, score_split) on small random models transformers builds.

- Every family: the pair matrix, the soft-cap term and the bias term sum to the kernel's own
  pre-softmax score within 1e-10 in float64 (norms held at the run's scales); held and unheld
  runs agree up to the float32 rounding of the norms a family computes in float32; each
  marginal sums to the raw score; each head component's source split sums to its key term.
- An additive score bias (ALiBi, added at the kernel's scores) comes back as the bias term.
- Outside references: taking one component out of the key input only, with the norm's scale
  frozen by hand (GPT-2: LayerNorm in float64; Llama: RMSNorm, transformers' own rotary), and
  handing the kernel that key moves its score by exactly that component's key-side term.
"""

import pytest
import torch
from hf_families import VOCAB, build

from headlab.attention.interventions import intervene, record
from headlab.circuits.score_keys import KeySpec, check_key, keys_for
from headlab.circuits.score_sides import Sides
from headlab.circuits.score_split import split_scores
from headlab.models.hf import attach
from headlab.results.score_split_result import ScoreSplitResult

FAMILIES = [
    "llama",
    "gpt2",
    "gpt_neox",
    "qwen2",
    "qwen3",
    "olmo2",
    "gemma2",
    "gemma3_text",
    "phi3",
    "gpt_oss",
]
LENGTH = 13


def _model(family):
    model = build(family).double()
    if family == "gpt_oss":  # grouped_mm takes no float64
        model.set_experts_implementation("eager")
    return attach(model)


def _ids(seed=0):
    ids = torch.randint(3, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(seed))
    ids[0, 9] = ids[0, 4]  # an induction key for query 9: position 5
    return ids


@pytest.mark.parametrize("family", FAMILIES)
def test_terms_sum_to_the_kernel_score(family):
    model = _model(family)
    sides = Sides(model, _ids())
    layer = sides.layers - 1
    held, plain = sides.clean_scores(layer)["scores"], sides.clean_scores(layer, held=False)
    seen = torch.isfinite(held)
    scale = float(held[seen].abs().max())
    assert float((held - plain["scores"])[seen].abs().max()) <= 1e-6 * scale
    for head in (0, model.layers[layer].num_heads - 1):
        result = split_scores(sides, layer, head, [9, 12], KeySpec.parse("all"), sources=2)
        assert len(result.pairs) > 4
        for pair in result.pairs:
            total = pair.raw + pair.softcap_term + pair.bias_term
            assert abs(total - pair.score) <= 1e-10
            assert abs(pair.score - float(held[0, head, pair.query, pair.key])) <= 1e-12
            assert abs(sum(pair.key_marginal) - pair.raw) <= 1e-10
            assert abs(sum(pair.query_marginal) - pair.raw) <= 1e-10
            assert abs(sum(map(sum, pair.pair)) - pair.raw) <= 1e-10
            for source in pair.sources:
                term = pair.key_marginal[result.components.index(source.component)]
                assert abs(sum(source.values) - term) <= 1e-10
        if family == "gemma2":
            assert max(abs(p.softcap_term) for p in result.pairs) > 1e-6


def test_sources_split_heads_of_linear_writes():
    sides = Sides(_model("llama"), _ids())
    result = split_scores(sides, 1, 4, [12], KeySpec.parse("attended"), sources=3)
    (pair,) = result.pairs
    assert len(pair.sources) == 3
    assert all(len(s.positions) == pair.key + 1 for s in pair.sources)


def test_an_additive_score_bias_is_the_bias_term():
    model = _model("llama")
    sides = Sides(model, _ids())
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.03, 0.01], dtype=torch.float64)
    distance = torch.arange(LENGTH)[None] - torch.arange(LENGTH)[:, None]  # key - query
    alibi = slopes[:, None, None] * distance.double()  # (head, q_pos, k_pos)

    with intervene(model.layers[1], "scores", lambda s: s + alibi):
        result = split_scores(sides, 1, 2, [11], KeySpec.parse("all"))
    for pair in result.pairs:
        assert abs(pair.bias_term - float(alibi[2, pair.query, pair.key])) <= 1e-10


def _kernel_score_with_key(sides, layer, head, query, key, new_k_row):
    """The kernel's score (query, key) of ``head`` when K/V head row ``key`` is replaced."""
    attention = sides.runner.blocks[layer].attention
    group = head // (attention.num_heads // attention.num_kv_heads)

    def replace(k):
        k = k.clone()
        k[0, group, key] = new_k_row
        return k

    with intervene(attention, "k", replace), record(attention, ["scores"]) as seen:
        sides.runner.forward(layer, sides.cache.resid[layer], 1)
    return float(seen["scores"][0, head, query, key])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_taking_a_component_out_of_the_key_moves_the_score_by_its_term(family):
    model = _model(family)
    sides = Sides(model, _ids(1))
    layer, head, query, key = 1, 1, 11, 6
    result = split_scores(sides, layer, head, [query], KeySpec.parse(str(key)))
    (pair,) = result.pairs
    writes = sides.writes(layer, slice(key, key + 1))[:, 0, 0]  # (component, embed_dim)
    x = sides.cache.resid[layer][0, key]
    module = model.model
    strongest = torch.tensor(pair.key_marginal[:-1]).abs().argsort(descending=True)[:3]
    plain = float(sides.clean_scores(layer, held=False)["scores"][0, head, query, key])
    for c in strongest.tolist():
        moved = (x - writes[c]).detach()
        if family == "gpt2":  # LayerNorm at the real stream's mean-free scale, then c_attn
            block = module.transformer.h[layer]
            norm = block.ln_1
            s = torch.sqrt(x.var(unbiased=False) + norm.eps)
            n = (moved - moved.mean()) / s * norm.weight + norm.bias
            width = model.config.n_embd
            k = (n @ block.attn.c_attn.weight + block.attn.c_attn.bias)[width : 2 * width]
            d = width // model.config.n_head
            k_row = k.view(-1, d)[head]
            tolerance = 1e-10
        else:  # RMSNorm at the real stream's scale, k_proj, transformers' own rotary
            from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

            block = module.model.layers[layer]
            norm = block.input_layernorm
            s = torch.sqrt(x.pow(2).mean() + norm.variance_epsilon)
            k = block.self_attn.k_proj(moved / s * norm.weight)
            d = model.layers[layer].head_dim
            cos, sin = module.model.rotary_emb(k[None, None], torch.tensor([[key]]))
            k = k.view(1, -1, 1, d)  # (batch, kv_head, pos, d_head)
            _, k = apply_rotary_pos_emb(k, k, cos, sin)
            shape = model.layers[layer]
            k_row = k[0, head // (shape.num_heads // shape.num_kv_heads), 0]
            tolerance = 1e-6 * abs(pair.raw)  # Llama's RMSNorm rounds to float32 in any dtype
        with torch.no_grad():
            moved_score = _kernel_score_with_key(sides, layer, head, query, key, k_row)
        assert abs((plain - moved_score) - pair.key_marginal[c]) <= tolerance


def test_keys_and_bad_keys():
    ids = [5, 7, 9, 5, 8, 7]
    scores = torch.tensor([0.0, 3.0, 1.0, 2.0, -1.0, 0.5])
    assert keys_for(KeySpec.parse("induction"), ids, 3) == [1]
    assert keys_for(KeySpec.parse("induction"), ids, 5) == [2]
    assert keys_for(KeySpec.parse("attended"), ids, 4, scores) == [1]
    assert keys_for(KeySpec.parse("top-2"), ids, 4, scores) == [1, 3]
    assert keys_for(KeySpec.parse("previous"), ids, 4) == [3]
    assert keys_for(KeySpec.parse("all"), ids, 2) == [0, 1, 2]
    for bad in ("top-0", "top--1", "top-x", "sideways"):
        with pytest.raises(ValueError, match="--keys"):
            KeySpec.parse(bad)
    with pytest.raises(ValueError, match="names no key"):
        keys_for(KeySpec.parse("induction"), ids, 2)
    with pytest.raises(ValueError, match="after query"):
        check_key(2, 4, 6, causal=True)
    check_key(2, 4, 6, causal=False)


def test_result_round_trips():
    sides = Sides(_model("llama"), _ids())
    result = split_scores(sides, 1, 0, [9], KeySpec.parse("induction"), recompute=True)
    again = ScoreSplitResult.from_dict(result.to_dict())
    assert again == result
    assert len(result.pairs[0].recomputed) == len(result.components)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox", "qwen2", "phi3"])
def test_at_length_marginals_equal_the_pair_split(family):
    from headlab.circuits.score_marginals import attended_marginals
    from headlab.circuits.score_sides import kernel_scale

    model = _model(family)
    sides = Sides(model, _ids(2))
    layer = sides.layers - 1
    clean = sides.clean_scores(layer)
    got = attended_marginals(sides, layer, kernel_scale(clean["q"], clean["k"], clean["logits"]))
    for head in (0, model.layers[layer].num_heads - 1):
        split = split_scores(
            sides, layer, head, list(range(LENGTH)), KeySpec.parse("attended"), sources=0
        )
        for pair in split.pairs:
            assert int(got["key"][head, pair.query]) == pair.key
            for side, want in (
                ("key_marginal", pair.key_marginal),
                ("query_marginal", pair.query_marginal),
            ):
                want = torch.tensor(want, dtype=torch.float64)
                assert float((got[side][head, pair.query] - want).abs().max()) <= 1e-12 * float(
                    want.abs().max()
                )


def test_at_length_marginals_refuse_qk_norm():
    from headlab.circuits.score_marginals import attended_marginals

    sides = Sides(_model("qwen3"), _ids())
    with pytest.raises(ValueError, match="no QK-norm"):
        attended_marginals(sides, 1, 0.3)


def test_at_length_marginals_refuse_a_window_only_the_config_names():
    """Mistral's attention module keeps no window (it is in the mask): the attended key of a
    query past the window would otherwise be searched over keys the model never sees."""
    from headlab.circuits.score_marginals import attended_marginals, every_layer

    model = _model("mistral")
    assert getattr(model.layers[0].module, "sliding_window", None) is None
    window = model.config.sliding_window
    assert window < LENGTH - 1  # a query exists whose earliest keys lie outside its window
    sides = Sides(model, _ids())
    with pytest.raises(ValueError, match="sliding window"):
        attended_marginals(sides, 1, 0.3)
    with pytest.raises(ValueError, match="sliding window"):
        next(every_layer(sides, [0.3] * sides.layers))


@pytest.mark.parametrize("layers", [1, 2])
def test_every_layer_equals_each_layer_alone(layers, monkeypatch):
    """Layers read the writes alone or side by side (``LAYERS``): the same marginals."""
    from headlab.circuits import score_marginals
    from headlab.circuits.score_marginals import attended_marginals, every_layer

    sides = Sides(_model("gpt_neox"), _ids(3))
    scales = [0.25, 0.5]
    monkeypatch.setattr(score_marginals, "LAYERS", layers)
    for layer, got in enumerate(every_layer(sides, scales)):
        alone = attended_marginals(sides, layer, scales[layer])
        for name in ("key", "query_marginal", "key_marginal"):
            assert torch.equal(got[name], alone[name]) or torch.allclose(
                got[name], alone[name], rtol=0, atol=1e-13
            )


@pytest.mark.parametrize(("family", "few", "many"), [("llama", 1, 3), ("gpt2", 0, 2)])
def test_at_length_marginals_do_not_depend_on_the_blocks(family, few, many, monkeypatch):
    """Blocks of 3 query rows and 5 positions (several over 13 positions), keys with at most
    ``few`` rows joining the query side's product, keys with more than ``many`` rows taking
    the product through W_K and those between a gathered product give what the defaults give:
    the blocks only order the work."""
    from headlab.circuits import score_marginals

    sides = Sides(_model(family), _ids(4))
    whole = score_marginals.attended_marginals(sides, 1, 0.375)
    monkeypatch.setattr(score_marginals, "ROWS", 3)
    monkeypatch.setattr(score_marginals, "POSITIONS", 5)
    monkeypatch.setattr(score_marginals, "FEW", few)
    monkeypatch.setattr(score_marginals, "MANY", many)
    blocked = score_marginals.attended_marginals(sides, 1, 0.375)
    assert torch.equal(whole["key"], blocked["key"])
    for name in ("query_marginal", "key_marginal"):
        assert torch.allclose(whole[name], blocked[name], rtol=0, atol=1e-12)


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen2", "phi3"])
def test_pair_matrix_over_queries_streamed_equals_the_pair_split(family, monkeypatch):
    """The pair matrix summed over every query at its attended key, made a few query positions
    at a time from a key/value context (score_pairs_streamed), equals the sum of the pair
    split's matrices (Sides' terms of the whole run) within 1e-10 in float64; its components
    are the split's, its keys the attended ones."""
    from headlab.circuits import score_pairs_streamed

    model = _model(family)
    ids = _ids(6)
    layer = len(model.layers) - 1
    head = model.layers[layer].num_heads - 1
    monkeypatch.setattr(score_pairs_streamed, "BLOCK", 4)
    got = score_pairs_streamed.pairs_over_queries(model, ids, layer, head)
    want, split = pair_split_sum(model, ids, layer, head)
    assert got.components == split.components
    for pair in split.pairs:
        assert int(got.key[pair.query]) == pair.key
        assert abs(float(got.raw[pair.query]) - pair.raw) <= 1e-10
    assert float((got.matrix - want).abs().max()) <= 1e-10 * float(want.abs().max())
    assert abs(float(got.matrix.sum() - got.raw.sum())) <= 1e-9


def pair_split_sum(model, ids, layer: int, head: int) -> tuple[torch.Tensor, ScoreSplitResult]:
    """(the pair split's matrices summed over every query of ``ids`` at its attended key
    (component + 1, component + 1), the split): the reference of the matrix over queries."""
    from headlab.circuits.score_split import terms_at

    sides = Sides(model, ids)
    queries = list(range(ids.shape[1]))
    split = split_scores(sides, layer, head, queries, KeySpec.parse("attended"), sources=0)
    terms = terms_at(sides, layer, head, split.kv_group, queries)
    want = 0
    for pair in split.pairs:
        want = want + split.scale * terms[pair.query][0] @ terms[pair.key][1].t()
    return want, split


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_attended_key_search_breaks_ties_as_a_brute_force(rows, monkeypatch):
    """The attended key of each query (``_keys``, blocks of ``rows`` queries, only the diagonal
    square masked) is the first of its highest causal scores: small integer q and k in float64
    make exact ties everywhere, against a loop over every (head, query, key)."""
    from headlab.circuits import score_marginals

    monkeypatch.setattr(score_marginals, "ROWS", rows)
    generator = torch.Generator().manual_seed(7)
    heads, per, length, d_head = 6, 2, 37, 5
    q = torch.randint(-2, 3, (heads, length, d_head), generator=generator).double()
    k = torch.randint(-2, 3, (heads // per, length, d_head), generator=generator).double()
    k[:, 11] = k[:, 3]  # planted ties: a later copy of an earlier key
    got = score_marginals._keys(q, k, per)
    for head in range(heads):
        for query in range(length):
            scores = [float(q[head, query] @ k[head // per, key]) for key in range(query + 1)]
            assert int(got[head, query]) == scores.index(max(scores))

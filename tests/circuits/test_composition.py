"""Composition scores against Elhage et al.'s formula written out here in float64 from the
family's own parameters (dense embed x embed products: W_QK = W_Q^T W_K, OV = W_O W_V, the input
norm's weight folded in), on tiny random transformers models: Llama with GQA (6 query heads on
2 K/V groups) and GPT-2 (fused c_attn, Conv1D). The random baseline's properties: seeded,
scale-free, about 1 / sqrt(embed)."""

from __future__ import annotations

import math

import pytest
import torch
import transformers
from hypothesis import given
from hypothesis import strategies as st

from headlab.circuits.composition import (
    LayerWeights,
    composition_scores,
    pair_scores,
    random_baseline,
)
from headlab.models.hf import attach
from headlab.results.composition_result import CompositionScores

# distinct sizes: embed 42 (transformers wants it a multiple of the heads), head_dim 4 (!= 42 / 6,
# even for rotary),
# 6 query heads on 2 K/V groups, 3 layers; GPT-2: embed 21, 3 heads of 7
LLAMA = dict(
    hidden_size=42,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=4,
    num_hidden_layers=3,
    intermediate_size=11,
    vocab_size=31,
    max_position_embeddings=32,
    tie_word_embeddings=False,
)
GPT2 = dict(n_embd=21, n_head=3, n_layer=3, n_inner=13, vocab_size=31, n_positions=32)


def _build(model_type: str, sizes: dict, seed: int = 3):
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(model_type, **sizes)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # norm weights off their constant init, so that folding matters
        for parameter in model.parameters():
            if parameter.ndim == 1:
                parameter.normal_(0.3, 0.5)
    return model


@torch.no_grad()
def _llama_heads(model) -> list[dict]:
    """Per layer: per query head (W_Q, W_K, W_V, W_O) as dense float64, column convention,
    the input norm's weight folded into W_Q, W_K, W_V."""
    config = model.config
    h, kv, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    out = []
    for block in model.model.layers:
        g = block.input_layernorm.weight.double()
        attn = block.self_attn
        q = attn.q_proj.weight.double().view(h, d, -1) * g
        k = attn.k_proj.weight.double().view(kv, d, -1) * g
        v = attn.v_proj.weight.double().view(kv, d, -1) * g
        o = attn.o_proj.weight.double().view(-1, h, d)
        group = [i // (h // kv) for i in range(h)]
        out.append(
            {
                "q": [q[i] for i in range(h)],
                "k": [k[group[i]] for i in range(h)],
                "v": [v[group[i]] for i in range(h)],
                "o": [o[:, i] for i in range(h)],
                "group": group,
            }
        )
    return out


@torch.no_grad()
def _gpt2_heads(model) -> list[dict]:
    config = model.config
    e, h = config.n_embd, config.n_head
    d = e // h
    out = []
    for block in model.transformer.h:
        g = block.ln_1.weight.double()
        fused = block.attn.c_attn.weight.double().t()  # Conv1D (in, 3 e) -> (3 e, in) = [q; k; v]
        q, k, v = (fused[i * e : (i + 1) * e].view(h, d, e) * g for i in range(3))
        o = block.attn.c_proj.weight.double().t().view(e, h, d)  # (out, in) columns per head
        out.append(
            {
                "q": list(q),
                "k": list(k),
                "v": list(v),
                "o": [o[:, i] for i in range(h)],
                "group": list(range(h)),
            }
        )
    return out


def _fro(m: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(m))


def _expected(layers: list[dict]) -> dict[tuple[str, str, str], float]:
    """(mode, sender, receiver) -> score, from dense products (Elhage et al. 2021)."""
    out = {}
    for r, receiver in enumerate(layers):
        qk = [wq.t() @ wk for wq, wk in zip(receiver["q"], receiver["k"], strict=True)]
        ov_r = [wo @ wv for wo, wv in zip(receiver["o"], receiver["v"], strict=True)]
        for s in range(r):
            sender = layers[s]
            for i, (wo, wv) in enumerate(zip(sender["o"], sender["v"], strict=True)):
                ov = wo @ wv  # (embed, embed): what head i writes for its input
                name = f"{s}.{i}"
                by_group = {}
                for j in range(len(qk)):
                    den_qk, den_ov = _fro(qk[j]) * _fro(ov), _fro(ov_r[j]) * _fro(ov)
                    out["q", name, f"{r}.{j}"] = _fro(qk[j].t() @ ov) / den_qk
                    out["k", name, f"{r}.{j}"] = _fro(qk[j] @ ov) / den_qk
                    out["v", name, f"{r}.{j}"] = _fro(ov_r[j] @ ov) / den_ov
                    parts = by_group.setdefault(receiver["group"][j], [0.0, 0.0, 0.0, 0.0])
                    parts[0] += _fro(qk[j] @ ov) ** 2
                    parts[1] += _fro(qk[j]) ** 2
                    parts[2] += _fro(ov_r[j] @ ov) ** 2
                    parts[3] += _fro(ov_r[j]) ** 2
                for g, (nk, dk, nv, dv) in by_group.items():
                    out["k_group", name, f"{r}.g{g}"] = math.sqrt(nk / dk) / _fro(ov)
                    out["v_group", name, f"{r}.g{g}"] = math.sqrt(nv / dv) / _fro(ov)
    return out


@pytest.mark.parametrize(
    ("model_type", "sizes", "heads"), [("llama", LLAMA, _llama_heads), ("gpt2", GPT2, _gpt2_heads)]
)
def test_composition_equals_the_dense_formula(model_type, sizes, heads):
    model = _build(model_type, sizes)
    result = composition_scores(attach(model), samples=4)
    expected = _expected(heads(model))
    assert result.folded_layers == [0, 1, 2]
    for (mode, sender, receiver), want in expected.items():
        got = result.score(mode, sender, receiver)
        assert got == pytest.approx(want, rel=1e-4, abs=1e-6), (mode, sender, receiver)
    # every pair not from an earlier layer is empty, every other one is filled
    filled = sum(v is not None for row in result.scores["k"] for v in row)
    assert filled == sum(1 for key in expected if key[0] == "k")


def test_without_folding_the_norm_weights_are_left_out():
    model = _build("llama", LLAMA)
    folded = composition_scores(attach(model), samples=2)
    plain = composition_scores(attach(model), samples=2, fold=False)
    assert plain.folded_layers == [] and plain.folded == "nothing"
    with torch.no_grad():
        for block in model.model.layers:
            block.input_layernorm.weight.fill_(1.0)
    unit = composition_scores(attach(model), samples=2)
    assert plain.scores == unit.scores
    assert folded.scores["k"] != plain.scores["k"]


def test_qk_norm_layers_keep_v_composition_and_say_why_q_and_k_are_missing():
    from hf_families import build

    result = composition_scores(attach(build("qwen3")), samples=2)
    assert set(result.missing) == {"0", "1"} and "no W_Q/W_K" in result.missing["1"]
    assert all(v is None for row in result.scores["k"] for v in row)
    assert result.score("v", "0.0", "1.3") is not None


def test_the_result_round_trips_and_refuses_a_broken_matrix():
    result = composition_scores(attach(_build("gpt2", GPT2)), samples=3)
    again = CompositionScores.from_dict(result.to_dict())
    assert again == result
    broken = result.to_dict()
    broken["scores"]["k"][0] = broken["scores"]["k"][0][:-1]
    with pytest.raises(ValueError, match=r"circuit-composition\.scores\.k\[0\]: expected a row"):
        CompositionScores.from_dict(broken)
    with pytest.raises(ValueError, match="mode must be one of"):
        result.score("x", "0.0", "1.0")


def _random_layer(generator, embed, d, heads, kv):
    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    return LayerWeights(
        draw(heads, d, embed),
        draw(kv, d, embed),
        draw(kv, d, embed),
        draw(heads, embed, d),
        heads,
        kv,
    )


@given(
    embed=st.integers(3, 17),
    d=st.integers(1, 6),
    kv=st.integers(1, 3),
    group=st.integers(1, 3),
    factor=st.floats(0.01, 100.0),
    seed=st.integers(0, 99),
)
def test_scores_are_in_unit_range_and_free_of_each_factors_scale(embed, d, kv, group, factor, seed):
    generator = torch.Generator().manual_seed(seed)
    sender = _random_layer(generator, embed, d, kv, kv)
    receiver = _random_layer(generator, embed, d, kv * group, kv)
    base = pair_scores(sender, receiver)
    scaled = LayerWeights(
        receiver.w_q * factor,
        receiver.w_k,
        receiver.w_v / factor,
        receiver.w_o * factor,
        receiver.heads,
        receiver.kv_heads,
    )
    again = pair_scores(sender, scaled)
    for mode, scores in base.items():
        assert bool(((scores >= 0) & (scores <= 1 + 1e-9)).all())
        torch.testing.assert_close(again[mode], scores)


def test_random_baseline_is_seeded_and_near_one_over_sqrt_embed():
    first = random_baseline(101, 13, 11, group_size=3, samples=48, seed=7)
    assert first == random_baseline(101, 13, 11, group_size=3, samples=48, seed=7)
    other = random_baseline(101, 13, 11, group_size=3, samples=48, seed=8)
    assert other.mean != first.mean
    for mode, mean in first.mean.items():
        # for Gaussian factors E||prod||^2 / (E||A||^2 E||B||^2) = 1 / embed exactly; the mean
        # of the ratio sits within a few of its standard errors of that
        assert abs(mean - 1 / math.sqrt(101)) < 0.08 / math.sqrt(101), mode
        assert 0 < first.std[mode] < mean
        assert abs(other.mean[mode] - mean) < 5 * first.std[mode] / math.sqrt(48) + 1e-3


@pytest.mark.parametrize("bad", [{"samples": 0}, {"group_size": 0}, {"embed": 0}])
def test_random_baseline_refuses_sizes_below_one(bad):
    sizes = {
        "embed": 5,
        "sender_d_head": 2,
        "receiver_d_head": 2,
        "group_size": 1,
        "samples": 2,
        **bad,
    }
    name = next(iter(bad))
    with pytest.raises(ValueError, match=f"{name} must be between 1"):
        random_baseline(**sizes)


class _Squash(torch.nn.Module):
    """A 1-D weight in front of the attention that is not a scaled normalisation."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, width))

    def forward(self, x):
        return torch.tanh(x) * self.weight


def test_a_norm_of_another_form_is_left_unfolded_and_said():
    model = _build("llama", LLAMA)
    model.model.layers[1].input_layernorm = _Squash(LLAMA["hidden_size"])
    result = composition_scores(attach(model), samples=2)
    assert result.folded_layers == [0, 2]
    assert result.missing["1"].startswith("norm not folded: the norm before the layer (_Squash)")
    assert result.score("k", "0.1", "1.4") is not None


@torch.no_grad()
def _toy_heads(toy) -> list[dict]:
    out = []
    for layer in toy.layers:
        h, kv, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
        q = layer.q.weight.double().view(h, d, -1)
        k, v = (w.weight.double().view(kv, d, -1) for w in (layer.k, layer.v))
        o = layer.o.weight.double().view(-1, h, d)
        group = [i // (h // kv) for i in range(h)]
        out.append(
            {
                "q": list(q),
                "k": [k[g] for g in group],
                "v": [v[g] for g in group],
                "o": [o[:, i] for i in range(h)],
                "group": group,
            }
        )
    return out


def test_composition_runs_on_the_interface_alone():
    from toy_family import Toy

    toy = Toy.build(seed=4, kv_heads=2)  # 4 query heads on 2 K/V groups, no norm
    result = composition_scores(toy, samples=2)
    assert result.folded_layers == [] and result.missing == {}
    for (mode, sender, receiver), want in _expected(_toy_heads(toy)).items():
        assert result.score(mode, sender, receiver) == pytest.approx(want, rel=1e-4, abs=1e-6)

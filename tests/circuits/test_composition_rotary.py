"""Rotary-aware composition against the formula written out here in float64: a tiny random
Llama (embed 35, 5 query heads on 1 K/V group, head_dim 6, rope_theta 7 so that every pair of
dimensions turns visibly), W_QK(delta) = W_Q^T R(-delta) W_K with R built by hand from the
config's frequencies as 2 x 2 rotations of dimensions (k, k + 3); the stacked score over several
offsets; offset 0 equals the score without rotary; refusals in one line."""

from __future__ import annotations

import math

import pytest
import torch
import transformers

from headlab.circuits.composition import composition_scores
from headlab.circuits.rotary_offsets import rotations
from headlab.models.hf import attach

EMBED, HEADS, D = 35, 5, 6
LLAMA = dict(
    hidden_size=EMBED,
    num_attention_heads=HEADS,
    num_key_value_heads=1,
    head_dim=D,
    num_hidden_layers=3,
    intermediate_size=11,
    vocab_size=31,
    max_position_embeddings=41,
    tie_word_embeddings=False,
    rope_theta=7.0,
)


def _llama(seed: int = 5):
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model("llama", **LLAMA)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim == 1:
                parameter.normal_(0.3, 0.5)
    return model


def _turn(delta: int) -> torch.Tensor:
    """R(delta) (d_head, d_head) float64: dimensions k and k + D/2 turned by
    delta * theta^(-2k/D)."""
    out = torch.zeros(D, D, dtype=torch.float64)
    for k in range(D // 2):
        angle = delta * LLAMA["rope_theta"] ** (-2 * k / D)
        c, s = math.cos(angle), math.sin(angle)
        a, b = k, k + D // 2
        out[a, a], out[a, b], out[b, a], out[b, b] = c, -s, s, c
    return out


@torch.no_grad()
def _expected(model, offsets: list[int]) -> dict[tuple[str, str, str], float]:
    """(mode, sender, receiver) -> the rotary-aware score, dense embed x embed products."""
    layers = []
    for block in model.model.layers:
        g = block.input_layernorm.weight.double()
        attn = block.self_attn
        q = attn.q_proj.weight.double().view(HEADS, D, EMBED) * g
        k = attn.k_proj.weight.double().view(D, EMBED) * g
        v = attn.v_proj.weight.double().view(D, EMBED) * g
        o = attn.o_proj.weight.double().view(EMBED, HEADS, D)
        layers.append((q, k, v, o))
    fro = torch.linalg.matrix_norm
    out = {}
    for r in range(1, len(layers)):
        q, k, _, _ = layers[r]
        for s in range(r):
            _, _, v_s, o_s = layers[s]
            for i in range(HEADS):
                ov = o_s[:, i] @ v_s  # (embed, embed)
                for j in range(HEADS):
                    qks = [q[j].t() @ _turn(-delta) @ k for delta in offsets]
                    den = math.sqrt(sum(float(fro(m)) ** 2 for m in qks)) * float(fro(ov))
                    kk = math.sqrt(sum(float(fro(m @ ov)) ** 2 for m in qks)) / den
                    qq = math.sqrt(sum(float(fro(m.t() @ ov)) ** 2 for m in qks)) / den
                    out["k", f"{s}.{i}", f"{r}.{j}"] = kk
                    out["q", f"{s}.{i}", f"{r}.{j}"] = qq
    return out


@pytest.mark.parametrize("offsets", [[1], [3], [1, 2, 7, 40]])
def test_rotary_aware_scores_equal_the_dense_formula(offsets):
    model = _llama()
    result = composition_scores(attach(model), samples=3, offsets=offsets)
    plain = composition_scores(attach(model), samples=3)
    assert result.rotary_offsets == offsets and "applied" in result.rotary
    moved = 0.0
    for (mode, sender, receiver), want in _expected(model, offsets).items():
        got = result.score(mode, sender, receiver)
        assert got == pytest.approx(want, rel=1e-5, abs=1e-7), (mode, sender, receiver)
        moved = max(moved, abs(got - plain.score(mode, sender, receiver)))
    assert moved > 1e-2  # rotary changes the scores, so the check above can fail
    assert result.scores["v"] == plain.scores["v"]  # values have no positions
    # the group's K score stacks its query heads over the offsets the same way
    want = _expected(model, offsets)
    for r in (1, 2):
        got = result.score("k_group", "0.2", f"{r}.g0")
        assert 0 < got <= max(want["k", "0.2", f"{r}.{j}"] for j in range(HEADS)) + 1e-9


def test_offset_zero_is_the_score_without_rotary():
    model = _llama(seed=8)
    at_zero = composition_scores(attach(model), samples=2, offsets=[0])
    plain = composition_scores(attach(model), samples=2)
    for mode in ("q", "k", "k_group"):
        for row_a, row_b in zip(at_zero.scores[mode], plain.scores[mode], strict=True):
            assert row_a == pytest.approx(row_b, abs=2e-6)


def test_rotations_are_orthogonal_and_the_identity_at_zero():
    turns = rotations(attach(_llama()), [0, 4], D)  # (offset, 2, d, d)
    eye = torch.eye(D, dtype=torch.float64)
    torch.testing.assert_close(turns[0, 0], eye)
    torch.testing.assert_close(turns[1, 0], _turn(4), atol=1e-6, rtol=0)
    for r in turns.flatten(0, 1):
        torch.testing.assert_close(r @ r.t(), eye, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("family", "offsets", "message"),
    [
        ("llama", [41], r"offsets must lie in 0\.\.40 \(the model's positions\), got 41"),
        ("llama", [], "offsets must name at least one"),
        ("gpt2", [1], "need a model with rotary positions"),
    ],
)
def test_bad_offsets_and_families_without_rotary_are_refused(family, offsets, message):
    if family == "llama":
        model = attach(_llama())
    else:
        config = transformers.GPT2Config(
            n_embd=21, n_head=3, n_layer=2, vocab_size=31, n_positions=32
        )
        model = attach(transformers.GPT2LMHeadModel(config).eval())
    with pytest.raises(ValueError, match=message) as error:
        composition_scores(model, samples=2, offsets=offsets)
    assert "\n" not in str(error.value)

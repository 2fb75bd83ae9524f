"""Edge attribution (EAP, EAP-IG) against exact path patching.

- A model whose every other part is linear (a tiny Llama with its norms removed, its MLP one
  linear map and W_Q = W_K = 0, so that attention is a fixed causal average; logit difference is
  linear in the logits): every edge's attribution equals its exact effect, for EAP, EAP-IG on
  the inputs and on each sender's activations, and EAP's scores of the edges into the logits
  sum to the total effect. Hanna et al.'s EAP-IG on the activations is not exact there (its
  runs cut the gradient at the node they move): exact into the logits only.
- Any model: EAP is the derivative of path patching in the size of the sender's write; central
  finite differences of exact patching give it (Richardson-extrapolated), through QK-norm
  (Qwen3), post-norms and soft-cap (Gemma 2), GQA (Llama), fused projections (GPT-2, GPT-NeoX).
- Agreement with exact patching on every edge of tiny models is reported (Spearman, top-k).
"""

import numpy as np
import pytest
import torch
from hf_families import VOCAB, build
from test_path_patching import sharp

from headlab.circuits.attribution import edge_attribution
from headlab.circuits.metrics import logit_difference
from headlab.circuits.patching import Patcher, path_patching
from headlab.circuits.score_agreement import agreement, ranks
from headlab.models.hf import attach


def _task(seed=3, batch=3, length=9):
    generator = torch.Generator().manual_seed(seed)
    clean = torch.randint(3, VOCAB, (batch, length), generator=generator)
    corrupted = clean.clone()
    corrupted[:, :5] = torch.randint(3, VOCAB, (batch, 5), generator=generator)
    position = torch.tensor([length - 1, length - 3, length - 2])[:batch]
    answer = torch.randint(3, VOCAB, (batch,), generator=generator)
    wrong = torch.randint(3, VOCAB, (batch,), generator=generator)
    return clean, corrupted, logit_difference(position, answer, wrong, length)


def linear_llama():
    """A tiny Llama (GQA, 6 heads on 2) whose parts besides the residual adds are linear."""
    model = sharp("llama")
    width = model.config.hidden_size
    with torch.no_grad():
        model.model.norm = torch.nn.Identity()
        for i, layer in enumerate(model.model.layers):
            layer.input_layernorm = torch.nn.Identity()
            layer.post_attention_layernorm = torch.nn.Identity()
            layer.mlp = torch.nn.Linear(width, width)
            generator = torch.Generator().manual_seed(i)
            torch.nn.init.normal_(layer.mlp.weight, std=0.3, generator=generator)
            layer.self_attn.q_proj.weight.zero_()
            layer.self_attn.k_proj.weight.zero_()
    return model


def test_linear_model_attribution_is_exact():
    clean, corrupted, metric = _task()
    model = attach(linear_llama())
    patcher = Patcher(model, clean, corrupted, metric)
    names = [e.name for e in patcher.graph.edges]
    exact = patcher.effects(names)
    scale = float(exact.abs().max())
    assert scale > 1e-2
    for method in ("eap", "eap-ig", "eap-ig-senders"):
        scores = edge_attribution(
            model, clean, corrupted, metric, method=method, steps=3, patcher=patcher
        )
        got = torch.tensor(scores.scores, dtype=torch.float64)
        torch.testing.assert_close(got, exact, rtol=0, atol=1e-4 * scale)
        into_logits = sum(
            s for e, s in zip(scores.edges, scores.scores, strict=True) if e.endswith("->logits")
        )
        total = patcher.corrupted_value - patcher.clean_value
        assert into_logits == pytest.approx(total, abs=1e-4 * abs(total))
    hanna = edge_attribution(
        model, clean, corrupted, metric, method="eap-ig-activations", steps=3, patcher=patcher
    )
    got = torch.tensor(hanna.scores, dtype=torch.float64)
    logits = torch.tensor([n.endswith("->logits") for n in names])
    torch.testing.assert_close(got[logits], exact[logits], rtol=0, atol=1e-4 * scale)
    assert float((got - exact).abs().max()) > 0.05 * scale


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma2", "gpt2", "gpt_neox"])
def test_eap_is_the_derivative_of_patching(family):
    clean, corrupted, metric = _task()
    model = attach(sharp(family).double())
    patcher = Patcher(model, clean, corrupted, metric)
    names = [e.name for e in patcher.graph.edges][::4]

    def central(eps):
        return (patcher.effects(names, scale=eps) - patcher.effects(names, scale=-eps)) / (2 * eps)

    # Richardson: the eps^2 terms cancel; eps stays large because the families' norms compute
    # in float32 even in a float64 model (that noise, over 2 eps, sets the tolerance: 0.1% of
    # the largest score)
    slope = (4 * central(1e-3) - central(2e-3)) / 3
    scores = edge_attribution(model, clean, corrupted, metric, edges=names, patcher=patcher)
    got = torch.tensor(scores.scores, dtype=torch.float64)
    scale = float(slope.abs().max())
    assert scale > 1e-3
    torch.testing.assert_close(got, slope, rtol=0, atol=1e-3 * scale)


def test_ranks_and_agreement_against_numpy():
    generator = np.random.default_rng(4)
    a = generator.integers(0, 5, 23).astype(float)  # ties
    order = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(float)
    mean_rank = {v: order[a == v].mean() for v in np.unique(a)}
    expected = np.array([mean_rank[v] for v in a])
    np.testing.assert_allclose(ranks(torch.tensor(a)).numpy(), expected)


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_agreement_with_patching_on_every_edge(family):
    clean, corrupted, metric = _task()
    model = attach(sharp(family))
    exact = path_patching(model, clean, corrupted, metric)
    for method in ("eap", "eap-ig"):
        scores = edge_attribution(model, clean, corrupted, metric, method=method, steps=4)
        found = agreement(exact, scores, k=10)
        assert found.edges == len(exact.edges)
        x, y = np.array(exact.scores), np.array(scores.scores)
        assert found.pearson == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-9)
        # the first-order estimate ranks the edges much as patching does on these models
        assert found.spearman > 0.6 and found.top_k_shared >= 5, found


def test_bad_method_and_steps():
    clean, corrupted, metric = _task()
    model = attach(build("llama"))
    methods = "eap, eap-ig, eap-ig-activations, eap-ig-senders"
    with pytest.raises(ValueError, match=f"method must be one of {methods}, got 'ig'"):
        edge_attribution(model, clean, corrupted, metric, method="ig")
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got 0"):
        edge_attribution(model, clean, corrupted, metric, method="eap-ig", steps=0)


def test_eap_ig_starts_at_the_corrupted_input():
    """Hanna et al.'s get_scores_eap_ig averages the gradient at alpha = k / m, k = 0 .. m - 1:
    with one step it is the gradient at the corrupted input alone, which is EAP of the swapped
    pair (its "clean" input is our corrupted one) with the writes' sign reversed."""
    clean, corrupted, metric = _task()
    model = attach(sharp("llama"))
    ig = edge_attribution(model, clean, corrupted, metric, method="eap-ig", steps=1)
    swapped = edge_attribution(model, corrupted, clean, metric, method="eap")
    got, want = np.array(ig.scores), -np.array(swapped.scores)
    assert np.abs(want).max() > 1e-3
    np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max())


def test_progress_advances_through_the_gradient_runs():
    clean, corrupted, metric = _task()
    model = attach(sharp("llama"))
    calls = []
    edge_attribution(
        model,
        clean,
        corrupted,
        metric,
        method="eap-ig",
        steps=3,
        progress=lambda done, total: calls.append((done, total)),
    )
    layers = model.model.config.num_hidden_layers
    # per step: the forward and backward, then each receiver layer and the logits (9 positions:
    # one block of rows)
    total = 3 * (1 + layers + 1)
    assert calls == [(i, total) for i in range(1, total + 1)]

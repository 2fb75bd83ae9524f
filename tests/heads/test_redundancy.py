"""Shared key/query subspaces: spectra against numpy's SVD, exact at full rank, rank bound."""

import copy

import numpy as np
import pytest
import torch

from headlab.attention import MultiHeadAttention
from headlab.heads.redundancy import (
    bilinear_forms,
    effective_rank,
    measure_redundancy,
    shared_projections,
    shared_subspaces,
)
from headlab.results.redundancy_result import RedundancyResult


def shared_key_query(
    module: MultiHeadAttention,
    rank: int,
    subspaces: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> MultiHeadAttention:
    """A copy of ``module`` with the W_Q and W_K of ``shared_projections``."""
    w_q, w_k = shared_projections(module, rank, subspaces)
    new = copy.deepcopy(module)
    old_q, old_k = new.query_key_weights()
    with torch.no_grad():
        old_q.copy_(w_q)
        old_k.copy_(w_k)
    return new


def _module(embed=15, heads=3, kv=None, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(embed, heads, num_kv_heads=kv, dtype=torch.float64)


@pytest.mark.parametrize(("heads", "kv"), [(3, None), (6, 2)])
def test_bilinear_forms_by_hand(heads, kv):
    m = _module(embed=18, heads=heads, kv=kv)
    w_q, w_k, _ = (w.detach().numpy() for w in m.projection_weights())
    d, group = m.head_dim, heads // m.num_kv_heads
    forms = bilinear_forms(m)
    for i in range(heads):
        g = i // group
        np.testing.assert_allclose(
            forms[i], w_q[i * d : (i + 1) * d].T @ w_k[g * d : (g + 1) * d], rtol=1e-12
        )


def test_shared_subspaces_against_svd_of_the_concatenation():
    m = _module(embed=15, heads=5, seed=1)
    forms = bilinear_forms(m)
    s, u, v = shared_subspaces(m)
    want = np.linalg.svd(forms.transpose(1, 0, 2).reshape(15, -1), compute_uv=False)
    np.testing.assert_allclose(s, want, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(u.T @ u, np.eye(15), atol=1e-10)
    np.testing.assert_allclose(v.T @ v, np.eye(15), atol=1e-10)
    # V: the right singular vectors of the stacked [B_1; ...; B_H]
    stacked = forms.reshape(-1, 15)
    right = np.linalg.svd(stacked, compute_uv=False)
    np.testing.assert_allclose(np.linalg.norm(stacked @ v, axis=0), right, rtol=1e-8)
    np.testing.assert_allclose(
        np.linalg.norm(u.T @ forms.transpose(1, 0, 2).reshape(15, -1), axis=1), s, rtol=1e-8
    )


def test_effective_rank_hand_cases():
    assert effective_rank(np.ones(7)) == pytest.approx(7.0)
    assert effective_rank(np.array([3.0, 0.0, 0.0])) == pytest.approx(1.0)
    assert effective_rank(np.array([1.0, 1.0, 2.0])) == pytest.approx(np.exp(1.5 * np.log(2)))


def test_full_rank_reproduces_the_module_and_rank_k_bounds_the_forms():
    m = _module(embed=15, heads=3, seed=2)
    x = torch.randn(2, 7, 15, dtype=torch.float64)
    full = shared_key_query(m, 15)
    torch.testing.assert_close(full(x, x, x)[0], m(x, x, x)[0], rtol=1e-10, atol=1e-10)
    cut = shared_key_query(m, 4)
    for form in bilinear_forms(cut):
        assert np.linalg.matrix_rank(form, tol=1e-9) <= 4
    assert cut.in_proj_weight is not m.in_proj_weight  # a copy; the original is untouched
    with pytest.raises(ValueError, match="rank must be between 1 and embed_dim=15, got 16"):
        shared_key_query(m, 16)


def test_measure_on_tiny_encoder_full_rank_is_exact(tiny):
    texts = ["the cat sat on the mat", "a dog ran in the park today", "heads share subspaces"]
    result = measure_redundancy(tiny, texts, ranks=(15, 5), max_length=12, batch_size=2)
    full = next(r for r in result.curve if r.rank == 15 and not r.original)
    assert full.measures["mean_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert len(result.layers) == 2
    for layer in result.layers:
        assert sum(layer.singular_values) == pytest.approx(1.0)
        assert 1.0 <= layer.effective_rank <= 15
    assert RedundancyResult.from_dict(result.to_dict()) == result


@pytest.mark.parametrize("ranks", [(15, 16), (0,)])
def test_measure_refuses_a_rank_outside_the_width_before_any_work(tiny, monkeypatch, ranks):
    import headlab.heads.redundancy as redundancy

    def never(*args, **kwargs):
        raise AssertionError("worked before the ranks were checked")

    monkeypatch.setattr(redundancy, "shared_subspaces", never)
    bad = next(k for k in ranks if not 1 <= k <= 15)
    with pytest.raises(ValueError, match=rf"^ranks must be between 1 and 15, got {bad}$"):
        measure_redundancy(tiny, ["a b c"], ranks=ranks, max_length=12)


def full_rank(model, rank: int):
    """``model`` with every layer's W_Q and W_K read through the shared subspaces at ``rank``."""
    layers = model.attention_layers()
    return model.with_query_key_weights(
        {i: shared_projections(layer, rank) for i, layer in enumerate(layers)}
    )


@pytest.mark.model
def test_full_rank_reproduces_minilm(minilm):
    """Every layer of the packaged MiniLM (on the route) re-parameterised at k = 384: the same
    embeddings."""
    batch = minilm.tokenize(["heads share their key and query spaces", "a short one"])
    with torch.inference_mode():
        torch.testing.assert_close(
            full_rank(minilm, 384).run(batch), minilm.run(batch), rtol=1e-4, atol=1e-5
        )


@pytest.mark.model
def test_full_rank_reproduces_smollm2(smollm2):
    """SmolLM2 (9 query heads on 3 K/V heads, rotary; on the route) at k = 576 in every layer:
    same logits."""
    batch = smollm2.tokenize(["Heads share their key and query spaces."])
    with torch.inference_mode():
        torch.testing.assert_close(
            full_rank(smollm2, 576).run(batch), smollm2.run(batch), rtol=1e-3, atol=1e-3
        )

"""Head importance: the head-mask gradient against finite differences (float64), normalisation."""

from __future__ import annotations

import pytest
import torch

from headlab.heads import contrastive_objective, head_importance
from headlab.heads.importance import info_nce, split_halves

TEXTS = [
    "the first text is about attention heads and masks",
    "a second text describes how the tokenizer splits words",
    "the third one mentions pruning rows and columns",
    "finally a fourth text with Ünïcödé and punctuation!",
    "one more sentence so that batches have several rows",
]


def test_split_halves():
    assert split_halves(["a b c d e"]) == (["a b"], ["c d e"])
    with pytest.raises(ValueError, match="at least 2 words"):
        split_halves(["single"])


def test_info_nce_by_hand():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    logits = torch.tensor([[1.0, 0.0], [0.0, 1.0]]) / 0.5
    expected = -torch.log_softmax(logits, dim=1).diagonal().mean()
    torch.testing.assert_close(info_nce(a, a, 0.5), expected)


def test_gradient_matches_finite_differences(tiny_dir):
    from headlab.models.hf import load_transformers

    enc = load_transformers(tiny_dir, dtype=torch.float64)  # the route, in float64
    xi = [torch.ones(3, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    loss = contrastive_objective(enc, TEXTS, xi, temperature=0.1)
    grads = torch.autograd.grad(loss, xi)
    eps = 1e-6
    for layer, head in [(0, 0), (0, 2), (1, 1)]:
        with torch.no_grad():
            values = []
            for sign in (1, -1):
                mask = [x.detach().clone() for x in xi]
                mask[layer][head] += sign * eps
                values.append(contrastive_objective(enc, TEXTS, mask, temperature=0.1).item())
        fd = (values[0] - values[1]) / (2 * eps)
        assert grads[layer][head].item() == pytest.approx(fd, rel=1e-5, abs=1e-9)
        assert abs(fd) > 1e-6  # the gradient is not zero at xi = 1


def test_importance_is_normalised_and_ranked(tiny):
    result = head_importance(tiny, TEXTS, batch_size=3)
    imp = torch.tensor(result.importance)
    torch.testing.assert_close(imp.norm(dim=1), torch.ones(2, dtype=imp.dtype))
    raw = torch.tensor(result.raw)
    torch.testing.assert_close(imp, raw / raw.norm(dim=1, keepdim=True))
    assert (raw > 0).all()
    ranking = result.ranking()
    assert sorted(ranking) == [(l, h) for l in range(2) for h in range(3)]
    values = [result.importance[l][h] for l, h in ranking]
    assert values == sorted(values)
    assert all(p.requires_grad for p in tiny.model.parameters())  # restored
    assert set(result.to_dict()) == {"model", "n_texts", "objective", "importance", "raw"}


def test_importance_mean_of_batch_gradients(tiny):
    # Two batches of 2 texts: raw = (|g_batch1| + |g_batch2|) / 2.
    texts = TEXTS[:4]
    result = head_importance(tiny, texts, batch_size=2)
    expected = torch.zeros(2, 3, dtype=torch.float64)
    for part in (texts[:2], texts[2:]):
        xi = [torch.ones(3, requires_grad=True) for _ in range(2)]
        grads = torch.autograd.grad(contrastive_objective(tiny, part, xi), xi)
        expected += torch.stack(grads).abs().double() / 2
    # Both are float32 gradients summed in another order: float32's tolerance, not float64's.
    torch.testing.assert_close(
        torch.tensor(result.raw, dtype=torch.float64), expected, rtol=1e-5, atol=1e-7
    )


def test_importance_errors(tiny):
    with pytest.raises(ValueError, match="at least 2 texts"):
        head_importance(tiny, ["only one text here"])


@pytest.mark.model
def test_importance_on_minilm_is_nonzero(minilm):
    result = head_importance(minilm, TEXTS * 2, batch_size=5)
    assert len(result.importance) == 6 and all(len(r) == 12 for r in result.importance)
    assert min(min(r) for r in result.raw) > 0

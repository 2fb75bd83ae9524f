"""The metrics against torch's own formulas (KL with ``kl_div``, log-probabilities with
``log_softmax``), one value per stacked copy; and the inputs patching refuses, in one line,
before any model runs."""

import pytest
import torch
import torch.nn.functional as F
from hf_families import VOCAB, build

from headlab.circuits.metrics import kl_to_clean, logit_difference, next_token_logprob
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach


def test_kl_and_logprob_per_copy():
    generator = torch.Generator().manual_seed(0)
    batch, length, vocab = 3, 7, 11
    mask = torch.zeros(batch, length, dtype=torch.bool)
    mask[:, 2:5] = True
    mask[1, 5] = True
    clean = torch.randn(batch, length, vocab, generator=generator, dtype=torch.float64)
    copies = torch.randn(2, batch, length, vocab, generator=generator, dtype=torch.float64)
    metric = kl_to_clean(mask)
    kept = metric.positions
    metric = metric.with_reference(clean[:, kept])
    got = metric(copies[:, :, kept].reshape(2 * batch, len(kept), vocab))
    for c in range(2):
        per = F.kl_div(
            copies[c].log_softmax(-1), clean.log_softmax(-1), log_target=True, reduction="none"
        ).sum(-1)  # (batch, pos)
        assert float(got[c]) == pytest.approx(float(per[mask].mean()), rel=1e-12)
    ids = torch.randint(0, vocab, (batch, length), generator=generator)
    logprob = next_token_logprob(ids, mask)
    got = logprob(copies[:, :, logprob.positions].reshape(2 * batch, -1, vocab))
    for c in range(2):
        lp = copies[c].log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
        assert float(got[c]) == pytest.approx(float(lp[mask[:, :-1]].mean()), rel=1e-12)


def test_refusals():
    model = attach(build("llama"))
    ids = torch.randint(3, VOCAB, (2, 6))
    good = logit_difference(torch.tensor([5, 4]), torch.tensor([3, 4]), torch.tensor([5, 6]), 6)
    with pytest.raises(ValueError, match=r"one shape, got \(2, 6\) and \(2, 7\)"):
        Patcher(model, ids, torch.randint(3, VOCAB, (2, 7)), good)
    far = logit_difference(torch.tensor([5, 4]), torch.tensor([3, VOCAB]), torch.tensor([5, 6]), 6)
    with pytest.raises(ValueError, match=rf"vocabulary 0..{VOCAB - 1}, got 3..{VOCAB}"):
        Patcher(model, ids, ids, far)
    three = logit_difference(
        torch.tensor([5, 4, 3]), torch.tensor([3, 4, 5]), torch.tensor([5, 6, 7]), 6
    )
    with pytest.raises(ValueError, match="the metric is for 3 texts, the batch has 2"):
        Patcher(model, ids, ids, three)
    with pytest.raises(ValueError, match="last position has no next token"):
        next_token_logprob(ids, torch.ones(2, 6, dtype=torch.bool))

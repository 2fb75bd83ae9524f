"""A user's metric function: path patching and edge attribution with ``custom_metric`` equal
the built-in logit difference when the function computes it by hand, on the tiny linear Llama
of test_attribution.py; a function that returns the wrong shape is refused naming the shape."""

import pytest
import torch
from test_attribution import _task, linear_llama

from headlab.circuits.attribution import edge_attribution
from headlab.circuits.metrics import custom_metric
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach


def _by_hand(metric):
    """The logit difference as a user writes it: logits (batch, n_kept, vocab)."""
    answers, wrong = metric.answers, metric.wrong  # (batch, n_kept)

    def difference(logits):
        return (logits.gather(-1, answers[..., None]) - logits.gather(-1, wrong[..., None]))[..., 0]

    mask = torch.zeros(metric.batch, 9, dtype=torch.bool)
    mask[:, metric.positions] = metric.weight.bool()
    return custom_metric(difference, mask, name="my_difference")


def test_a_metric_function_scores_edges_as_the_builtin_metric_does():
    clean, corrupted, builtin = _task()
    mine = _by_hand(builtin)
    model = attach(linear_llama())
    names = [e.name for e in Patcher(model, clean, corrupted, builtin).graph.edges][::7]
    want = Patcher(model, clean, corrupted, builtin).effects(names)
    patcher = Patcher(model, clean, corrupted, mine)
    torch.testing.assert_close(patcher.effects(names), want, rtol=1e-6, atol=1e-6)
    for method in ("eap", "eap-ig"):
        a = edge_attribution(model, clean, corrupted, builtin, method=method, steps=2, edges=names)
        b = edge_attribution(model, clean, corrupted, mine, method=method, steps=2, edges=names)
        assert b.metric == "my_difference"
        assert b.scores == pytest.approx(a.scores, rel=1e-5, abs=1e-6)


def test_a_metric_function_of_the_wrong_shape_or_name_is_refused():
    mask = torch.zeros(3, 9, dtype=torch.bool)
    mask[:, 4] = True
    metric = custom_metric(lambda logits: logits.sum(-1).sum(-1), mask)  # (batch,) not (batch, 1)
    with pytest.raises(
        ValueError,
        match=r"must return \(batch, n_kept\) = \(3, 1\) values, got "
        r"\(3,\)",
    ):
        metric(torch.zeros(3, 1, 11))
    with pytest.raises(ValueError, match="needs a name of its own"):
        custom_metric(lambda logits: logits[..., 0], mask, name="logprob")

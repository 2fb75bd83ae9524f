"""Each task's metric and the model's own performance, against the same numbers computed here
by hand from transformers' own logits of the tiny Llama (no headlab in the forward), and an
oracle model that always answers right."""

from __future__ import annotations

import pytest
import torch
from task_tokenizers import tiny_llama, word_tokenizer

from headlab.circuits.task_performance import task_metric, task_performance
from headlab.circuits.tasks import TaskRequest, build_pairs
from headlab.results.circuit_tasks import TaskPerformance


@pytest.fixture(scope="module")
def model():
    return tiny_llama(word_tokenizer())


def _eager_logits(model, ids):
    with torch.no_grad():
        return model.model(input_ids=ids).logits.double()  # transformers' forward, plain


def _by_hand(pairs, logits) -> tuple[float, float]:
    """(the metric's mean, the accuracy) of ``logits`` (batch, pos, vocab), loops only."""
    values, right = [], []
    for r, p in pairs.mask.nonzero().tolist():
        row = logits[r, p]
        if pairs.metric == "logprob":
            values.append(float(row.log_softmax(-1)[pairs.answers[r, p]]))
            right.append(int(row.argmax()) == int(pairs.answers[r, p]))
        elif pairs.metric == "logit_diff":
            diff = float(row[pairs.answers[r, p]] - row[pairs.wrong[r, p]])
            values.append(diff)
            right.append(diff > 0)
        else:
            probs = row.softmax(-1)
            signed = zip(pairs.candidates[r], pairs.signs[r], strict=True)
            diff = sum(float(s) * float(probs[c]) for c, s in signed)
            values.append(diff)
            right.append(diff > 0)
    return sum(values) / len(values), sum(right) / len(right)


@pytest.mark.parametrize(
    "request_",
    [
        TaskRequest("induction", n_pairs=3, length=9, seed=2),
        TaskRequest("ioi", n_pairs=5, seed=2),
        TaskRequest("greater-than", n_pairs=4, seed=2),
    ],
    ids=["induction", "ioi", "greater-than"],
)
def test_performance_equals_the_metric_by_hand_on_transformers_logits(model, request_):
    pairs = build_pairs(request_, model)
    got = task_performance(model, pairs, batch_size=2)
    clean, accuracy = _by_hand(pairs, _eager_logits(model, pairs.clean))
    corrupted, _ = _by_hand(pairs, _eager_logits(model, pairs.corrupted))
    assert got.clean == pytest.approx(clean, rel=1e-4, abs=1e-5)
    assert got.corrupted == pytest.approx(corrupted, rel=1e-4, abs=1e-5)
    assert got.accuracy == pytest.approx(accuracy)
    assert got.does_task == (accuracy >= 0.5)
    assert TaskPerformance.from_dict(got.to_dict()) == got


def test_the_kl_metric_is_zero_on_the_clean_run(model):
    pairs = build_pairs(TaskRequest("ioi", n_pairs=3, seed=1), model)
    kl = task_metric(pairs, "kl")
    logits = _eager_logits(model, pairs.clean).float()[:, kl.positions]
    assert float(kl.with_reference(logits)(logits)) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match=r"metric must be 'logit_diff' .* or 'kl', got 'logprob'"):
        task_metric(pairs, "logprob")


class _Oracle:
    """A model that puts all its weight on the right answer (the pairs' own) everywhere."""

    name, causal = "oracle", True

    def __init__(self, pairs, vocab):
        self.pairs, self.output_width = pairs, vocab

    def run(self, batch):
        ids = batch.input_ids
        logits = torch.zeros(*ids.shape, self.output_width)
        row_of = {tuple(r.tolist()): i for i, r in enumerate(self.pairs.clean)}
        for b, row in enumerate(ids):
            i = row_of.get(tuple(row.tolist()))
            if i is None:  # a corrupted row: no answer at all
                continue
            if self.pairs.candidates is not None:
                later = self.pairs.candidates[i][self.pairs.signs[i] > 0]
                logits[b, :, later] = 9.0
            else:
                logits[b].scatter_(-1, self.pairs.answers[i, :, None], 9.0)
        return logits


@pytest.mark.parametrize("task", ["induction", "ioi", "greater-than"])
def test_a_model_that_answers_right_does_the_task(model, task):
    pairs = build_pairs(TaskRequest(task, n_pairs=4, seed=3), model)
    got = task_performance(_Oracle(pairs, len(model.tokenizer)), pairs)
    assert got.accuracy == 1.0 and got.does_task
    assert got.clean > got.corrupted
    assert "the model does the task" in got.says()

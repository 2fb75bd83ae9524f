"""A task's metric (``circuits.metrics.Metric``) and the model's own performance on the task,
measured before any circuit is looked for: a small model may not do a task at all (IOI in a
135M model), and a circuit of a behaviour the model lacks explains nothing.

``task_metric(pairs, kind)`` turns ``TaskPairs`` into the metric patching and attribution read
(the task's own, or "kl": KL to the clean run at the same positions). ``task_performance(model,
pairs)`` runs clean and corrupted once each: the metric's mean on both, and an accuracy:

    logprob     share of answer positions where the answer is the model's top-1 token
    logit_diff  share of pairs whose answer logit beats the wrong one (IOI: IO over S)
    prob_diff   share of pairs with more probability on the later years than on the others
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.circuits.metrics import Metric, answer_logprob, kl_to_clean
from headlab.circuits.tasks import TaskPairs
from headlab.limits import check_int
from headlab.models.interface import TokenBatch
from headlab.results.circuit_tasks import TaskPerformance

#: below this share of pairs (or answer positions) done right, the model is said not to do the task
DOES_TASK = 0.5


def task_metric(pairs: TaskPairs, kind: str | None = None) -> Metric:
    """The metric of ``pairs`` (``kind`` None: the task's own; "kl": KL to the clean run at the
    task's positions). ValueError for another kind."""
    kind = kind or pairs.metric
    if kind == "kl":
        return kl_to_clean(pairs.mask)
    if kind != pairs.metric:
        raise ValueError(f"metric must be {pairs.metric!r} (the task's) or 'kl', got {kind!r}")
    if kind == "logprob":
        return answer_logprob(pairs.mask, pairs.answers)
    positions = pairs.mask.any(0).nonzero().squeeze(-1)  # (n_kept,)
    weight = pairs.mask[:, positions].float()  # (batch, n_kept)
    if kind == "logit_diff":
        return Metric(
            "logit_diff", positions, weight, pairs.answers[:, positions], pairs.wrong[:, positions]
        )
    return Metric("prob_diff", positions, weight, candidates=pairs.candidates, signs=pairs.signs)


def forward_logits(model, ids: Tensor, batch_size: int = 8) -> Tensor:
    """(batch, pos) ids -> (batch, pos, vocab) logits, ``batch_size`` rows at a time. Right
    padding needs no mask in a causal model: it comes after every position read."""
    out = []
    with torch.no_grad():
        for chunk in ids.split(batch_size):
            batch = TokenBatch(
                chunk,
                torch.ones_like(chunk, dtype=torch.bool),
                tokens=[[] for _ in range(len(chunk))],
            )
            out.append(model.run(batch).float())
    return torch.cat(out)


def task_performance(model, pairs: TaskPairs, batch_size: int = 8) -> TaskPerformance:
    """The model's metric on clean and corrupted, and its accuracy on clean (module
    docstring); ``does_task`` when the accuracy reaches ``DOES_TASK``."""
    check_int("batch_size", batch_size)
    if not getattr(model, "causal", True):
        raise ValueError(f"{model.name} is not a language model: its attention is not causal")
    metric = task_metric(pairs)
    metric.check_vocab(model.output_width)
    clean = forward_logits(model, pairs.clean, batch_size)  # (batch, pos, vocab)
    corrupted = forward_logits(model, pairs.corrupted, batch_size)
    kept = metric.positions
    clean_value = float(metric(clean[:, kept]).item())
    corrupted_value = float(metric(corrupted[:, kept]).item())
    accuracy = _accuracy(pairs, clean)
    return TaskPerformance(
        task=pairs.task,
        metric=pairs.metric,
        n_pairs=pairs.batch,
        clean=clean_value,
        corrupted=corrupted_value,
        accuracy=accuracy,
        does_task=accuracy >= DOES_TASK,
    )


def _accuracy(pairs: TaskPairs, logits: Tensor) -> float:
    rows, positions = pairs.mask.nonzero(as_tuple=True)
    at = logits[rows, positions]  # (n_read, vocab)
    if pairs.metric == "logprob":
        return float((at.argmax(-1) == pairs.answers[rows, positions]).float().mean())
    if pairs.metric == "logit_diff":
        right = at.gather(-1, pairs.answers[rows, positions, None])
        wrong = at.gather(-1, pairs.wrong[rows, positions, None])
        return float((right > wrong).float().mean())
    probs = at.softmax(-1).gather(-1, pairs.candidates[rows])  # (n_read, n)
    return float(((probs * pairs.signs[rows]).sum(-1) > 0).float().mean())

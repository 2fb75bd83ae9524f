"""What a patching or attribution run measures: a scalar per copy of the batch, from the logits.

A metric reads the next-token logits at a few positions only (``positions``, (n_kept,) int64,
shared by the batch), so that a patched run computes the unembedding there alone (transformers'
``logits_to_keep``). ``weight`` (batch, n_kept) says which (text, position) pairs count: the
metric is their weighted mean, one value per copy when a run stacks copies of the batch.

    logit difference   logit[answer] - logit[wrong]                   (IOI, Wang et al. 2022)
    log-probability    log softmax(logits)[answer]                     (induction: the next tokens)
    KL to the clean    sum_v p_clean(v) (log p_clean(v) - log p(v))    (EAP-IG's metric for
                                                                        general behaviour)
    prob. difference   sum_c sign_c p(candidate_c)                     (greater-than, Hanna et
                                                                        al. 2023: years above
                                                                        YY +1, the others -1)

Higher is better for the first two; KL is 0 on the clean run and grows with any change.

A metric of your own: ``custom_metric(function, mask)``, with ``function`` taking the logits at
the kept positions, (batch, n_kept, vocab), to one value per (text, position), (batch, n_kept),
built from torch operations so that attribution can differentiate it (close over the tensors it
needs: answer ids, a direction). Its kind in the results is the name you give it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

MetricKind = Literal["logit_diff", "logprob", "kl", "prob_diff"] | str
METRIC_KINDS = ("logit_diff", "logprob", "kl", "prob_diff")
#: A user's metric: (batch, n_kept, vocab) logits -> (batch, n_kept) values, differentiable.
MetricFunction = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Metric:
    """See the module docstring. answers, wrong: (batch, n_kept) token ids (wrong only for
    logit_diff); reference: the clean run's log-probabilities (batch, n_kept, vocab), which a
    KL metric needs before it can be evaluated (``with_reference``); candidates (batch, n)
    token ids and signs (batch, n) of prob_diff, the same at every kept position; function: a
    user's metric (``custom_metric``), whose ``kind`` is its name."""

    kind: MetricKind
    positions: Tensor
    weight: Tensor
    answers: Tensor | None = None
    wrong: Tensor | None = None
    reference: Tensor | None = None
    candidates: Tensor | None = None
    signs: Tensor | None = None
    function: MetricFunction | None = None

    def __post_init__(self) -> None:
        if self.function is not None:
            if not callable(self.function):
                raise ValueError(f"function must be callable, got {type(self.function).__name__}")
            if self.kind in METRIC_KINDS or not self.kind:
                raise ValueError(
                    f"a metric function needs a name of its own (not one of "
                    f"{', '.join(METRIC_KINDS)}), got {self.kind!r}"
                )
        elif self.kind not in METRIC_KINDS:
            raise ValueError(f"metric must be one of {', '.join(METRIC_KINDS)}, got {self.kind!r}")
        if self.kind == "prob_diff" and (self.candidates is None or self.signs is None):
            raise ValueError("metric 'prob_diff' needs candidate tokens and their signs")
        if self.kind in ("logit_diff", "logprob") and self.answers is None:
            raise ValueError(f"metric {self.kind!r} needs answer tokens")
        if self.kind == "logit_diff" and self.wrong is None:
            raise ValueError("metric 'logit_diff' needs wrong-answer tokens")
        if float(self.weight.sum()) <= 0:
            raise ValueError("the metric must count at least one (text, position), got none")

    @property
    def batch(self) -> int:
        return self.weight.shape[0]

    def with_reference(self, clean_logits: Tensor) -> Metric:
        """The metric with the clean run's (batch, n_kept, vocab) logits as KL's reference."""
        return dataclasses.replace(self, reference=clean_logits.detach().log_softmax(-1))

    def check_vocab(self, vocab: int) -> None:
        """ValueError for an answer token outside ``vocab`` (where the metric counts it)."""
        counted = self.weight > 0  # (batch, n_kept); the other entries are placeholders
        named = (
            ("answer", self.answers),
            ("wrong-answer", self.wrong),
            ("candidate", self.candidates),
        )
        for name, ids in named:
            if ids is not None and ids.shape == counted.shape:
                ids = ids[counted]
            if ids is None or not ids.numel():
                continue
            if not 0 <= int(ids.min()) <= int(ids.max()) < vocab:
                raise ValueError(
                    f"{name} tokens must lie in the vocabulary 0..{vocab - 1}, got "
                    f"{int(ids.min())}..{int(ids.max())}"
                )

    def __call__(self, logits: Tensor) -> Tensor:
        """(copies * batch, n_kept, vocab) logits -> (copies,) metric values (with autograd)."""
        b = self.batch
        copies = logits.shape[0] // b
        logits = logits.view(copies, b, *logits.shape[1:])  # (copies, batch, n_kept, vocab)
        if self.function is not None:
            per = self._custom(logits)
        elif self.kind == "logit_diff":
            right = _take(logits, self.answers)
            per = right - _take(logits, self.wrong)
        elif self.kind == "logprob":
            per = _take(logits.log_softmax(-1), self.answers)
        elif self.kind == "prob_diff":
            probs = logits.softmax(-1)  # (copies, batch, n_kept, vocab)
            index = self.candidates.to(probs.device)[None, :, None, :]
            index = index.expand(probs.shape[0], -1, probs.shape[2], -1)  # (.., n_kept, n)
            signs = self.signs.to(probs)[None, :, None, :]
            per = (probs.gather(-1, index) * signs).sum(-1)  # (copies, batch, n_kept)
        else:
            if self.reference is None:
                raise ValueError("a KL metric needs the clean run's logits (with_reference)")
            reference = self.reference.to(logits.dtype)  # (batch, n_kept, vocab)
            per = (reference.exp() * (reference - logits.log_softmax(-1))).sum(-1)
        weight = self.weight.to(per.dtype)
        return (per * weight).sum((1, 2)) / weight.sum()

    def _custom(self, logits: Tensor) -> Tensor:
        """The user's function on each copy's (batch, n_kept, vocab) logits: (copies, batch,
        n_kept); ValueError naming the shape it returned when that is not (batch, n_kept)."""
        b, n_kept = logits.shape[1:3]
        out = []
        for copy in logits:  # (batch, n_kept, vocab): the shapes the function's tensors have
            per = self.function(copy)
            if not isinstance(per, Tensor) or tuple(per.shape) != (b, n_kept):
                got = tuple(per.shape) if isinstance(per, Tensor) else type(per).__name__
                raise ValueError(
                    f"metric {self.kind!r} must return (batch, n_kept) = "
                    f"({b}, {n_kept}) values, got {got}"
                )
            out.append(per)
        return torch.stack(out)  # (copies, batch, n_kept)


def _take(values: Tensor, ids: Tensor) -> Tensor:
    """values (copies, batch, n_kept, vocab), ids (batch, n_kept) -> (copies, batch, n_kept)."""
    index = ids.to(values.device)[None, :, :, None].expand(values.shape[0], -1, -1, 1)
    return values.gather(-1, index).squeeze(-1)


def _kept(mask: Tensor) -> tuple[Tensor, Tensor]:
    """(batch, pos) bool -> (positions (n_kept,) where any text counts, weight (batch, n_kept))."""
    positions = mask.any(0).nonzero().squeeze(-1)
    return positions, mask[:, positions].float()


def logit_difference(position: Tensor, answer: Tensor, wrong: Tensor, length: int) -> Metric:
    """logit[answer] - logit[wrong] at one position per text: position, answer, wrong (batch,)
    int64; length: the texts' token count."""
    mask = torch.zeros(position.shape[0], length, dtype=torch.bool)
    mask[torch.arange(position.shape[0]), position] = True
    positions, weight = _kept(mask)
    full = torch.zeros(mask.shape, dtype=torch.long)
    full_wrong = torch.zeros(mask.shape, dtype=torch.long)
    full[torch.arange(position.shape[0]), position] = answer
    full_wrong[torch.arange(position.shape[0]), position] = wrong
    return Metric("logit_diff", positions, weight, full[:, positions], full_wrong[:, positions])


def answer_logprob(mask: Tensor, answers: Tensor) -> Metric:
    """Mean log-probability of ``answers`` (batch, pos) int64 predicted at each position where
    ``mask`` (batch, pos) bool is True (induction: the next token of the repeated half)."""
    positions, weight = _kept(mask)
    return Metric("logprob", positions, weight, answers[:, positions])


def next_token_logprob(ids: Tensor, mask: Tensor) -> Metric:
    """``answer_logprob`` of the next token of ``ids`` (batch, pos) at the positions of ``mask``
    (the last position has no next token and must be False)."""
    if bool(mask[:, -1].any()):
        raise ValueError("the last position has no next token to predict; leave it out of mask")
    answers = torch.zeros_like(ids)
    answers[:, :-1] = ids[:, 1:]
    return answer_logprob(mask, answers)


def kl_to_clean(mask: Tensor) -> Metric:
    """Mean KL(clean || patched) of the next-token distribution at the positions of ``mask``
    (batch, pos) bool; the runner supplies the clean logits."""
    positions, weight = _kept(mask)
    return Metric("kl", positions, weight)


def custom_metric(function: MetricFunction, mask: Tensor, name: str = "custom") -> Metric:
    """A metric of your own (the module docstring): ``function`` (batch, n_kept, vocab) logits
    -> (batch, n_kept) values, averaged over the positions of ``mask`` (batch, pos) bool, and
    named ``name`` in the results. Higher should mean "more of the behaviour", as for the
    built-in metrics."""
    positions, weight = _kept(mask)
    return Metric(name, positions, weight, function=function)


__all__ = [
    "METRIC_KINDS",
    "Metric",
    "MetricFunction",
    "answer_logprob",
    "custom_metric",
    "kl_to_clean",
    "logit_difference",
    "next_token_logprob",
]

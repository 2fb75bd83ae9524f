"""Clean and corrupted token ids of a circuits task and what its metric reads: ``TaskPairs``,
made by the task builders (``tasks_builtin``, ``tasks_pairs``) and read by the circuits. Shapes:
``batch, pos``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

METRICS = ("logprob", "logit_diff", "prob_diff")


@dataclass(frozen=True)
class TaskPairs:
    """Clean and corrupted token ids and what the metric reads.

    clean, corrupted: (batch, pos) int64 (equal shapes; padded on the right with ``pad_id``
    where ``lengths`` differ, only for pairs that allow it); mask: (batch, pos) bool, the
    positions whose next-token logits the metric reads; answers: (batch, pos) int64, the token
    counted at each such position (0 elsewhere); wrong: (batch, pos) int64, the token subtracted
    (logit_diff), or None; candidates, signs: (batch, n) int64 / float, the tokens summed with
    sign +1 or -1 (prob_diff: the year tokens above and at or below YY), or None.
    """

    task: str
    metric: str
    clean: Tensor
    corrupted: Tensor
    mask: Tensor
    answers: Tensor
    wrong: Tensor | None = None
    candidates: Tensor | None = None
    signs: Tensor | None = None
    pad_id: int = 0
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        shape = tuple(self.clean.shape)
        for name in ("corrupted", "mask", "answers", "wrong"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != shape:
                raise ValueError(
                    f"{name} must have the clean ids' shape {shape}, got {tuple(value.shape)}"
                )
        if not bool(self.mask.any(1).all()):
            raise ValueError("every pair needs at least one position the metric reads")

    @property
    def batch(self) -> int:
        return int(self.clean.shape[0])

    def differing_positions(self) -> Tensor:
        """(batch, pos) bool: where corrupted differs from clean."""
        return self.clean != self.corrupted


def last_position_answers(
    clean: Tensor, position: Tensor, answer: Tensor, wrong: Tensor | None
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(mask, answers, wrong) of (batch, pos) for one answer per text at ``position`` (batch,)."""
    rows = torch.arange(clean.shape[0])
    mask = torch.zeros(clean.shape, dtype=torch.bool)
    mask[rows, position] = True
    answers = torch.zeros_like(clean)
    answers[rows, position] = answer
    if wrong is None:
        return mask, answers, None
    wrong_full = torch.zeros_like(clean)
    wrong_full[rows, position] = wrong
    return mask, answers, wrong_full


def check_positions(tokens: int, positions: int | None, what: str) -> None:
    """The one check of a task's length against the model's positions: ValueError when
    ``what`` (a task's inputs, a line's text) has more ``tokens`` than the model has
    ``positions`` (None: no limit known)."""
    if positions is not None and tokens > positions:
        raise ValueError(
            f"{what} has {tokens} tokens, more than the model's {positions} "
            "positions (max_position_embeddings): a position past them has no "
            "embedding or was never trained"
        )


__all__ = ["METRICS", "TaskPairs", "check_positions", "last_position_answers"]

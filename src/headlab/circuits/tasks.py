"""Tasks for circuits, each a clean input with its corrupted counterpart: ``TaskRequest`` (a typed
request that checks itself; its errors name the option) -> ``TaskPairs`` (token ids).

    induction     BOS + r + r against BOS + r' + r, r and r' ``length`` seeded random tokens;
                  metric: mean log-probability of the second half's next tokens
    copy          the long-range copy task of ``heads.repeats.copy_task`` (``length`` tokens);
                  corrupted: the first occurrence of the passage replaced by random tokens;
                  metric: mean log-probability of the copied tokens
    ioi           "When Mary and John went to the store, John gave a drink to" -> " Mary"
                  (Wang et al. 2022) with the tokenizer's own single-token names; corrupted:
                  three other names (their ABC distribution); metric: logit difference
                  logit[IO] - logit[S] at the last position
    greater-than  "The war lasted from the year 17YY to the year 17" (Hanna et al. 2023);
                  corrupted: YY = 01; metric: probability difference sum_{y > YY} p(y) -
                  sum_{y <= YY} p(y) over the two-digit year tokens
    pairs         the user's own JSONL of clean and corrupted texts with answer tokens
                  (``tasks_pairs``)

Built-in tasks are built in ``tasks_builtin``. Shapes: ``batch, pos``. Clean and corrupted have
the same length in every built-in task (a pair whose lengths differ is refused or redrawn).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor

from headlab.limits import check_int, check_seed

TASKS = ("induction", "copy", "ioi", "greater-than", "pairs")
METRICS = ("logprob", "logit_diff", "prob_diff")
#: the default ``length`` of each task that has one (tokens of r; tokens of the copy text)
DEFAULT_LENGTHS = {"induction": 40, "copy": 512}


@dataclass(frozen=True)
class TaskRequest:
    """One task's pairs: ``task`` (one of ``TASKS``), ``n_pairs`` pairs from ``seed``,
    ``length`` (induction: tokens of r; copy: tokens of the text; None: ``DEFAULT_LENGTHS``),
    ``pairs_file`` (the user's JSONL, for task "pairs" only), ``equal_lengths`` (the method
    needs clean and corrupted of equal length: path patching and EAP do). ValueError naming the
    option for a bad value."""

    task: str = "induction"
    n_pairs: int = 8
    length: int | None = None
    seed: int = 0
    pairs_file: str | None = None
    equal_lengths: bool = True

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        check_int("n_pairs", self.n_pairs, low=1, high=4096)
        check_seed("seed", self.seed)
        if self.length is not None:
            if self.task not in DEFAULT_LENGTHS:
                raise ValueError(f"length applies to induction and copy only, not {self.task}")
            low = 2 if self.task == "induction" else 16
            check_int("length", self.length, low=low, high=1 << 20)
        if (self.pairs_file is None) == (self.task == "pairs"):
            raise ValueError(
                "pairs_file must be given with task 'pairs' (and only then), got "
                f"{self.pairs_file!r} for task {self.task!r}"
            )
        if self.pairs_file is not None and not Path(self.pairs_file).is_file():
            raise ValueError(f"pairs_file must be a file, got {self.pairs_file!r}")

    @property
    def resolved_length(self) -> int | None:
        return self.length if self.length is not None else DEFAULT_LENGTHS.get(self.task)

    def to_dict(self) -> dict:
        return asdict(self)


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
                raise ValueError(f"{name} must have the clean ids' shape {shape}, got "
                                 f"{tuple(value.shape)}")  # fmt: skip
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
        raise ValueError(f"{what} has {tokens} tokens, more than the model's {positions} "
                         "positions (max_position_embeddings): a position past them has no "
                         "embedding or was never trained")  # fmt: skip


def task_positions(request: TaskRequest, model) -> int | None:
    """How many tokens the built-in task's inputs have, known before its pairs are drawn
    (induction: BOS, if the tokenizer has one, + twice the length; copy: the length, its most);
    None for the tasks whose texts the tokenizer decides (ioi, greater-than, pairs)."""
    length = request.resolved_length
    if request.task == "induction":
        bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
        return 2 * length + (bos is not None)
    return length if request.task == "copy" else None


def check_task_length(request: TaskRequest, model) -> int | None:
    """``task_positions``, checked against ``model.max_positions`` (``check_positions``, the
    message naming the longest length that fits)."""
    known = task_positions(request, model)
    positions = getattr(model, "max_positions", None)
    if known is not None and positions is not None:
        most = positions if request.task == "copy" else (positions - known % 2) // 2
        check_positions(known, positions, f"the {request.task} task of length="
                        f"{request.resolved_length} (at most {most} fits)")  # fmt: skip
    return known


def build_pairs(request: TaskRequest, model) -> TaskPairs:
    """The pairs ``request`` asks for, in ``model``'s tokens (a model of the transformers route,
    or ``headlab.models.preview``'s view of one before its weights load: its ``tokenizer`` and
    ``max_positions``; the copy task also uses ``model.count_tokens`` and ``model.tokenize``).
    ValueError naming what the tokenizer lacks (no single-token names, no two-digit years), and
    for inputs longer than the model's positions (``check_positions``; an induction or copy
    task before its pairs are drawn)."""
    from headlab.circuits import tasks_builtin, tasks_pairs

    tokenizer = tokenizer_of(model)
    seed, n = request.seed, request.n_pairs
    positions = getattr(model, "max_positions", None)
    check_task_length(request, model)
    if request.task == "induction":
        return tasks_builtin.induction(tokenizer, n, request.resolved_length, seed)
    if request.task == "copy":
        return tasks_builtin.copy(model, tokenizer, n, request.resolved_length, seed)
    if request.task == "pairs":
        rows = tasks_pairs.read_pairs(request.pairs_file)
        return tasks_pairs.encode_pairs(rows, tokenizer, request.equal_lengths,
                                        where=request.pairs_file, positions=positions)  # fmt: skip
    built = tasks_builtin.ioi if request.task == "ioi" else tasks_builtin.greater_than
    pairs = built(tokenizer, n, seed)
    check_positions(int(pairs.clean.shape[1]), positions, f"the {request.task} task's text")
    return pairs


def tokenizer_of(model):
    """The tokenizer a model holds (``TransformersModel.tokenizer``); ValueError without one."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise ValueError(f"{getattr(model, 'name', 'the model')} has no tokenizer to build "
                         "task texts with")  # fmt: skip
    return tokenizer

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

Built-in tasks are built in ``tasks_builtin``; the pairs themselves (``TaskPairs``) are in
``clean_corrupted``, which both builders import (no import circle). Shapes: ``batch, pos``.
Clean and corrupted have the same length in every built-in task (a pair whose lengths differ is
refused or redrawn).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from headlab.circuits.clean_corrupted import (
    METRICS,
    TaskPairs,
    check_positions,
    last_position_answers,
)
from headlab.limits import check_int, check_seed

TASKS = ("induction", "copy", "ioi", "greater-than", "pairs")
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
        check_positions(
            known,
            positions,
            f"the {request.task} task of length={request.resolved_length} (at most {most} fits)",
        )
    return known


def build_pairs(request: TaskRequest, model) -> TaskPairs:
    """The pairs ``request`` asks for, in ``model``'s tokens (a model of the transformers route,
    or ``headlab.models.outline``'s view of one before its weights load: its ``tokenizer`` and
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
        return tasks_pairs.encode_pairs(
            rows, tokenizer, request.equal_lengths, where=request.pairs_file, positions=positions
        )
    built = tasks_builtin.ioi if request.task == "ioi" else tasks_builtin.greater_than
    pairs = built(tokenizer, n, seed)
    check_positions(int(pairs.clean.shape[1]), positions, f"the {request.task} task's text")
    return pairs


def tokenizer_of(model):
    """The tokenizer a model holds (``TransformersModel.tokenizer``); ValueError without one."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise ValueError(
            f"{getattr(model, 'name', 'the model')} has no tokenizer to build task texts with"
        )
    return tokenizer


__all__ = [
    "DEFAULT_LENGTHS",
    "METRICS",
    "TASKS",
    "TaskPairs",
    "TaskRequest",
    "build_pairs",
    "check_positions",
    "check_task_length",
    "last_position_answers",
    "task_positions",
    "tokenizer_of",
]

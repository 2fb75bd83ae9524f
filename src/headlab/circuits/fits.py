"""Whether a circuits run fits the model, known before its weights load: from the model's config
and tokenizer (``headlab.models.preview``) and the request alone.

    check_fits_model(request, preview)   the task's inputs within the model's positions (the one
                                         check, ``tasks.check_positions``; a line of the user's
                                         pairs names itself)

``prepare`` checks the built pairs again against the loaded model (the same check), which
covers a preview without a tokenizer yet (a hub checkpoint still to fetch).
"""

from __future__ import annotations

from headlab.circuits.run import CircuitRequest
from headlab.circuits.tasks import build_pairs, check_task_length


def task_shape(request: CircuitRequest, preview) -> tuple[int, int]:
    """(batch, pos) of the task's clean inputs, checked against the model's positions. Without
    a tokenizer at hand, a lower bound (the induction task's BOS unknown, the other tasks' texts
    one token: their check comes after the load)."""
    task = request.task
    known = check_task_length(task, preview)  # induction, copy: no pairs drawn
    if known is not None:
        return task.n_pairs, known
    if preview.tokenizer is None:
        return task.n_pairs, 1
    pairs = build_pairs(task, preview)  # ioi, greater-than, the user's pairs: the tokenizer's
    return int(pairs.clean.shape[0]), int(pairs.clean.shape[1])


def check_fits_model(request: CircuitRequest, preview) -> None:
    """ValueError, before the model loads, for a task whose inputs the model cannot hold."""
    task_shape(request, preview)

"""Wu et al.'s (2024) check of retrieval heads, as ``model kv-budget`` runs it: copy accuracy
with the top-k retrieval heads masked (zeroed before W_O) against k random heads drawn from the
other heads, one draw per seed.

Every draw holds exactly k heads, so k can be at most half the model's heads: a larger k is
refused (``check_retrieval_k``), and a default k (the heads scoring >= ``RETRIEVAL``) that would
exceed it is lowered to half the heads, and the check's note says so.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path

from headlab.heads.ablation import ablated
from headlab.heads.roles import RETRIEVAL
from headlab.models.interface import HeadModel
from headlab.results.kv_budget_result import RetrievalCheck

Head = tuple[int, int]  # (layer, head)


def most_heads(model: HeadModel) -> int:
    """The largest k the check can honour: k masked heads and k random others."""
    return sum(model.heads_per_layer) // 2


def check_retrieval_k(model: HeadModel, k: int) -> None:
    """ValueError unless 1 <= ``k`` <= half of ``model``'s heads (known before any run)."""
    _check_k(model.name, sum(model.heads_per_layer), k)


def check_retrieval_k_declared(source: str | Path | None, k: int) -> None:
    """``check_retrieval_k`` before the model loads, on the head count its config.json declares
    (layers x query heads, ``declared_heads``): the same ValueError. Nothing is checked where the
    config is not at hand without loading (a GGUF not yet converted, a hub id not in the cache,
    a source the load itself will refuse); ``check_retrieval_k`` still runs after the load."""
    from headlab.models.hf.checkpoint import declared_config
    from headlab.models.hf.config_fields import declared_heads

    config = declared_config(source)
    total = None if config is None else declared_heads(config)
    if total is not None:
        _check_k(str(source or "minilm"), total, k)


def _check_k(name: str, total: int, k: int) -> None:
    most = total // 2  # k masked heads and k random others (``most_heads``)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= most:
        raise ValueError(
            f"retrieval_k must be between 1 and {most} for {name}'s {total} heads (k "
            f"retrieval heads are masked against k random heads drawn from the other "
            f"{total} - k), got {k!r}"
        )


def ranked(scores: Sequence[Sequence[float]]) -> list[tuple[float, int, int]]:
    """(score, layer, head) of every head, highest score first."""
    return sorted(
        ((v, layer, h) for layer, row in enumerate(scores) for h, v in enumerate(row)), reverse=True
    )


def chosen_heads(
    scores: Sequence[Sequence[float]], k: int | None, most: int
) -> tuple[list[Head], str]:
    """(the top-k heads by retrieval score, the note saying how k was chosen). ``k`` None: the
    heads scoring >= RETRIEVAL, at least one (the best), at most ``most``."""
    cells = ranked(scores)
    note = ""
    if k is None:
        scoring = sum(v >= RETRIEVAL for v, _, _ in cells)
        k = min(max(scoring, 1), most)
        if scoring == 0:
            note = (
                f"no head scores >= {RETRIEVAL} (the best: {cells[0][0]:.3f}); masked the top one"
            )
        elif scoring > most:
            note = (
                f"{scoring} heads score >= {RETRIEVAL}; masked the top {most}, half the "
                "heads, so that as many random heads could be drawn from the "
                "others"
            )
    return [(layer, h) for _, layer, h in cells[:k]], note


def retrieval_check(
    model: HeadModel,
    scores: list[list[float]],
    k: int | None,
    seeds: int,
    copy_accuracy: Callable[[], float],
    step: Callable[[], None],
) -> RetrievalCheck:
    """Run the check: ``copy_accuracy()`` (one model run on the held-out text) with the top-k
    heads by ``scores`` (layer, head) masked, then with k random other heads per seed;
    ``step()`` after each run. ``k`` must have passed ``check_retrieval_k``."""
    top, note = chosen_heads(scores, k, most_heads(model))
    k = len(top)
    with ablated(model, top):
        masked = copy_accuracy()
    step()
    others = [(layer, h) for _, layer, h in ranked(scores)[k:]]  # the order of the ranking
    drawn = [random.Random(seed).sample(others, k) for seed in range(seeds)]
    accuracy = []
    for heads in drawn:
        with ablated(model, heads):
            accuracy.append(copy_accuracy())
        step()
    return RetrievalCheck(
        k,
        [list(h) for h in top],
        masked,
        accuracy,
        [[list(h) for h in heads] for heads in drawn],
        note,
    )

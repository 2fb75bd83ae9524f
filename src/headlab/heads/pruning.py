"""Physical head pruning and the pruning curve (Michel et al. 2019, section 4), for any model.

Heads are removed from the weights by the model itself (``HeadModel.without_heads``; for
headlab's own models ``headlab.attention.pruned``: rows of W_Q and columns of W_O go, a K/V head
with the last query head that reads it, copies made for uneven groups are not counted as
parameters). The pruned model computes exactly what the original computes with those heads'
mask set to 0 (tested).

``by="mask"`` prunes by masking instead, for any model, also one whose layout cannot lose heads
(a fused q/k/v projection): the heads' mask is 0 in every run (``MaskedHeads``); the parameters
and the work stay, so the curve's parameter counts do not fall and its latencies are not those
of a smaller model.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterable, Mapping

import torch

from headlab.heads.quality import measures, reference
from headlab.heads.requests import PRUNE_FRACTIONS as FRACTIONS
from headlab.heads.requests import PruneRequest, Texts, analysis_request, check_by, corpus_texts
from headlab.models.head_mask import as_mask
from headlab.models.interface import HeadModel
from headlab.results.prune_result import PruneResult, PruneStep


def unique_parameters(model: HeadModel) -> int:
    """Parameters of ``model``, K/V copies made by pruning counted once."""
    return model.parameter_count()


def prune_heads(
    model: HeadModel, heads: Mapping[int, Iterable[int]], by: str = "removal"
) -> HeadModel:
    """``model`` without the given heads: {layer: [head, ...]} (current indices), removed from
    its weights (``by="removal"``: layers not named are shared with ``model``, pruned layers get
    new attention blocks) or masked in every run (``by="mask"``, any model)."""
    check_by(by)
    if by == "mask":
        return MaskedHeads(model, heads)
    return model.without_heads(heads)


class MaskedHeads:
    """``model`` with the mask of ``heads`` ({layer: [head]}) at 0 in every ``run`` and
    ``objective`` (multiplied into any head mask passed); everything else is ``model``'s."""

    def __init__(self, model: HeadModel, heads: Mapping[int, Iterable[int]]) -> None:
        self.model = model
        self.mask = as_mask(model, heads)

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def _with(self, head_mask):
        if head_mask is None:
            return self.mask
        return [m if h is None else h * m for m, h in zip(self.mask, head_mask, strict=True)]

    def run(self, batch, head_mask=None):
        return self.model.run(batch, self._with(head_mask))

    def objective(self, texts, head_mask=None, max_length=None):
        return self.model.objective(texts, self._with(head_mask), max_length)


def check_prunable(model: HeadModel, by: str = "removal") -> None:
    """ValueError, before any long work, when ``model`` cannot lose heads ``by`` removal (the
    model says why: a fused projection, a norm over all heads, ...)."""
    check_by(by)
    if by == "removal":
        model.without_heads({0: [0]})


def _latency_ms(model: HeadModel, texts: list[str], max_length: int, repeats: int) -> float:
    batch = model.tokenize(texts, max_length)
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            model.run(batch)
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def prune_curve(
    model: HeadModel,
    texts: list[str],
    ranking: list[tuple[int, int]],
    *,
    fractions: tuple[float, ...] = FRACTIONS,
    seed: int = 0,
    batch_size: int = 32,
    max_length: int = 128,
    latency_repeats: int = 3,
    on_step: Callable[[int], None] | None = None,
    by: str = "removal",
) -> PruneResult:
    """Prune growing shares of all heads in two orders and measure each pruned model.

    ``ranking``: every (layer, head), least important first (ImportanceResult.ranking()). The
    control order is a seeded random permutation. For each order and fraction f the first
    round(f * n_heads) heads go; the step reports the parameters of the whole model (K/V copies
    once), the median latency of one batch (``batch_size`` texts), and the measures of
    ``headlab.heads.quality`` against the unpruned model.
    """
    total = sum(model.heads_per_layer)
    if sorted(ranking) != [(l, h) for l, n in enumerate(model.heads_per_layer) for h in range(n)]:
        raise ValueError(f"ranking must list each of the {total} (layer, head) pairs once")
    if len(texts) < 2:
        raise ValueError(f"expected at least 2 texts, got {len(texts)}")
    shuffled = list(ranking)
    random.Random(seed).shuffle(shuffled)
    original = reference(model, texts, max_length, batch_size)
    timing_texts = texts[:batch_size]
    steps = []
    for order, sequence in (("importance", ranking), ("random", shuffled)):
        for f in fractions:
            n = round(f * total)
            removed: dict[int, list[int]] = {}
            for layer, head in sequence[:n]:
                removed.setdefault(layer, []).append(head)
            pruned = prune_heads(model, removed, by)
            steps.append(
                PruneStep(
                    order=order,
                    fraction_pruned=f,
                    heads_pruned=n,
                    params=unique_parameters(pruned),
                    latency_ms=_latency_ms(pruned, timing_texts, max_length, latency_repeats),
                    measures=measures(pruned, texts, original, max_length, batch_size),
                )
            )
            if on_step is not None:
                on_step(len(steps))
    return PruneResult(model.name, len(texts), steps, by)


def prune_by_importance(
    model: HeadModel,
    texts: PruneRequest | Texts,
    *,
    seed: int | None = None,
    fractions: tuple[float, ...] | None = None,
    max_length: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
    by: str | None = None,
) -> PruneResult:
    """The whole ``headlab model prune`` pipeline: Michel et al. importance on the texts, then
    ``prune_curve`` in that order and in a seeded random one. ``texts``: a ``PruneRequest``, or
    its corpus with its options as keywords (None: its default). ``on_step(done, total)`` after
    the importance pass and after each pruned model (``total`` = 1 + 2 * len(fractions))."""
    from headlab.heads.importance import head_importance

    request = analysis_request(PruneRequest, texts, seed=seed, fractions=fractions, by=by)
    texts, max_length = corpus_texts(request.corpus, max_length, model.max_positions)
    total = 1 + 2 * len(request.fractions)
    check_prunable(model, request.by)  # a layout that cannot lose heads, before importance
    ranking = head_importance(model, texts, max_length=max_length).ranking()
    if on_step is not None:
        on_step(1, total)
    return prune_curve(
        model,
        texts,
        ranking,
        fractions=request.fractions,
        seed=request.seed,
        max_length=max_length,
        on_step=None if on_step is None else lambda done: on_step(1 + done, total),
        by=request.by,
    )

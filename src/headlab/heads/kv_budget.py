"""A per-head KV budget, proven by running the model with it (DuoAttention's question, answered
exactly rather than by a trained gate).

A *plan* lets some K/V groups keep only the first ``sinks`` keys and the last ``window`` ones,
as a KV cache that dropped the rest would; the other groups keep everything. The model then runs
exactly as planned: the query heads of a windowed group get a ``KeyBudget`` at their layer's
sites (``headlab.attention.sites``), so the kernel hides every other key from them, in one
forward per plan. Measured on a held-out long text with a repeated passage
(``heads.repeats.copy_task``): perplexity of the tokens that are not copies, and copy accuracy
(the share of copy positions where the model's top-1 prediction is the true next token).

``kv_budget`` ranks the groups by their window error on a calibration text (``heads.roles``),
windows the lowest share ``budget`` of them, and compares that plan with the full model, with
the same number of groups chosen at random (several seeds) and with the opposite ranking (the
highest errors first). A second check after Wu et al. (2024): masking (zeroing before W_O) the
top-k retrieval heads against k random heads, on copy accuracy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F

from headlab.attention.sites import KeyBudget
from headlab.heads.ablation import ablated
from headlab.heads.long_context import long_text_statistics
from headlab.heads.repeats import MIN_MATCH, copy_sources, copy_task
from headlab.heads.roles import RETRIEVAL, SINKS, WINDOW, HeadRoles
from headlab.limits import check_int
from headlab.models.interface import HeadModel, TokenBatch
from headlab.schema import Fields, problem

Group = tuple[int, int]  # (layer, K/V group)


@dataclass(frozen=True)
class KVPlan:
    """The K/V groups that keep only ``sinks`` + ``window`` keys; every other keeps all."""

    windowed: tuple[Group, ...]
    sinks: int = SINKS
    window: int = WINDOW

    def kv_saved(self, kv_heads_per_layer: Sequence[int], n_tokens: int) -> float:
        """full KV memory / this plan's at ``n_tokens`` tokens (1.0: nothing saved)."""
        full = sum(kv_heads_per_layer) * n_tokens
        kept = min(n_tokens, self.sinks + self.window)
        planned = full - len(self.windowed) * (n_tokens - kept)
        return full / planned


@contextmanager
def planned(model: HeadModel, plan: KVPlan) -> Iterator[HeadModel]:
    """Within the block, ``model`` runs with ``plan``: the query heads of each windowed group see
    only its sinks and window. Raises ValueError for a group the model does not have."""
    layers = model.attention_layers()
    budgets: dict[int, torch.Tensor] = {}
    for layer, group in plan.windowed:
        kv = model.kv_heads_per_layer[layer] if 0 <= layer < len(layers) else 0
        if not 0 <= group < kv:
            raise ValueError(f"plan: K/V group {layer}.{group} is not in the model")
        heads = model.heads_per_layer[layer]
        chosen = budgets.setdefault(layer, torch.zeros(heads, dtype=torch.bool))
        m = heads // kv
        chosen[group * m : (group + 1) * m] = True
    try:
        for layer, heads in budgets.items():
            layers[layer].sites.budget = KeyBudget(plan.sinks, plan.window, heads)
        yield model
    finally:
        for layer in budgets:
            layers[layer].sites.budget = None


@dataclass(frozen=True)
class Evaluation:
    """One run on the held-out text: perplexity of its non-copy tokens, copy accuracy."""

    perplexity: float
    copy_accuracy: float


@torch.no_grad()
def evaluate(model: HeadModel, batch: TokenBatch, sources: torch.Tensor) -> Evaluation:
    """One forward of ``model`` on a one-text ``batch`` with copy positions ``sources`` (pos,)."""
    logits = model.run(batch)[0, :-1]  # (pos - 1, vocab): predictions of tokens 1..
    targets = batch.input_ids[0, 1:]
    copies = sources[:-1] >= 0
    losses = F.cross_entropy(logits.double(), targets, reduction="none")
    perplexity = math.exp(float(losses[~copies].mean()))
    hits = logits[copies].argmax(-1) == targets[copies]
    return Evaluation(perplexity, float(hits.double().mean()) if len(hits) else 0.0)


@dataclass(frozen=True)
class PlanRun:
    """One plan run: ``kind`` full | chosen | random | opposite (``seed`` for random) at
    ``budget`` (share of K/V groups windowed), its groups, the KV memory saved (full / planned)
    and the evaluation."""

    kind: str
    budget: float
    seed: int | None
    groups: list[list[int]]
    kv_saved: float
    perplexity: float
    copy_accuracy: float

    @classmethod
    def from_dict(cls, f: Fields) -> PlanRun:
        kind = f.str("kind")
        if kind not in KINDS:
            raise problem(f.at("kind"), " | ".join(KINDS), kind)
        seed = None if f.data.get("seed") is None else f.int("seed")
        groups = f.list("groups")
        for i, g in enumerate(groups):
            if not (isinstance(g, list) and len(g) == 2 and all(isinstance(x, int) for x in g)):
                raise problem(f"{f.at('groups')}[{i}]", "[layer, group]", g)
        return cls(kind, f.number("budget", 0.0, 1.0), seed, groups, f.number("kv_saved", 1.0),
                   f.number("perplexity", 0.0), f.number("copy_accuracy", 0.0, 1.0))  # fmt: skip


KINDS = ("full", "chosen", "random", "opposite")


@dataclass(frozen=True)
class RetrievalCheck:
    """Copy accuracy with the top-``k`` retrieval heads masked, against ``k`` random heads."""

    k: int
    heads: list[list[int]]
    copy_accuracy: float
    random_copy_accuracy: list[float]

    @classmethod
    def from_dict(cls, f: Fields) -> RetrievalCheck:
        return cls(f.int("k", 1), f.list("heads"), f.number("copy_accuracy", 0.0, 1.0),
                   [float(v) for v in f.numbers("random_copy_accuracy")])  # fmt: skip


@dataclass(frozen=True)
class KVBudgetResult:
    """``runs``: the full model, then per budget the chosen plan, the random ones and the
    opposite one; ``retrieval``: the masking check (None without retrieval heads)."""

    KIND: ClassVar[str] = "model-kv-budget"

    model: str
    n_tokens: int
    sinks: int
    window: int
    copy_positions: int
    group_ranking: list[list[float]]  # [layer, group, window error], lowest error first
    runs: list[PlanRun] = field(default_factory=list)
    retrieval: RetrievalCheck | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        if self.retrieval is None:
            out.pop("retrieval")
        return out

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-kv-budget") -> KVBudgetResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        ranking = f.list("group_ranking")
        for i, row in enumerate(ranking):
            if not (isinstance(row, list) and len(row) == 3):
                raise problem(f"{f.at('group_ranking')}[{i}]", "[layer, group, error]", row)
        runs = [PlanRun.from_dict(r) for r in f.objects("runs")]
        check = None
        if "retrieval" in data:
            check = RetrievalCheck.from_dict(f.object("retrieval"))
        return cls(f.str("model"), f.int("n_tokens", 2), f.int("sinks"), f.int("window", 1),
                   f.int("copy_positions"), ranking, runs, check)  # fmt: skip

    def baseline(self) -> PlanRun:
        return next(r for r in self.runs if r.kind == "full")


def check_budgets(budgets: Sequence[float]) -> None:
    """ValueError naming ``budgets`` unless each is in (0, 1]."""
    if not budgets:
        raise ValueError("budgets must list at least one share of K/V groups, got none")
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int | float) or not 0 < b <= 1:
            raise ValueError(f"budgets must be shares in (0, 1], got {b!r}")


def ranked_groups(roles: HeadRoles) -> list[list[float]]:
    """[layer, group, window error] of every K/V group, lowest error first."""
    cells = [[layer, g, err] for layer, row in enumerate(roles.group_window_error)
             for g, err in enumerate(row)]  # fmt: skip
    return sorted(cells, key=lambda c: (c[2], c[0], c[1]))


def kv_budget(
    model: HeadModel,
    *,
    budgets: Sequence[float] = (0.25, 0.5, 0.75),
    n_tokens: int | None = None,
    sinks: int = SINKS,
    window: int = WINDOW,
    seeds: int = 3,
    calibration_text: str | None = None,
    evaluation_text: str | None = None,
    retrieval_k: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> KVBudgetResult:
    """Rank, plan and verify (see the module docstring). Texts default to the built-in copy
    task at ``n_tokens`` tokens (calibration seed 0, evaluation seed 1). ``retrieval_k``: how
    many retrieval heads to mask (default: those scoring >= 0.1, at least 1). ``on_step(done,
    total)`` after each model run. Raises ValueError, before the model runs, for budgets outside
    (0, 1], a window or sink count out of range, a text not longer than the window, or an
    evaluation text without copy positions."""
    check_budgets(budgets)
    check_int("seeds", seeds)
    check_int("sinks", sinks, low=0)
    check_int("window", window)
    if model.objective_kind != "next-token":
        raise ValueError(f"{model.name} predicts no tokens: a KV budget needs a language model")
    n_tokens = model.max_positions if n_tokens is None else n_tokens
    check_int("n_tokens", n_tokens, low=2, high=model.max_positions)
    if n_tokens <= sinks + window:
        raise ValueError(
            f"n_tokens={n_tokens} is not longer than sinks {sinks} + window {window}: every key "
            "is in the window"
        )
    calibration = calibration_text or copy_task(model, n_tokens, seed=0).text
    held_out = evaluation_text or copy_task(model, n_tokens, seed=1).text
    batch = model.tokenize([held_out], n_tokens)
    if batch.input_ids.shape[1] <= sinks + window:
        raise ValueError(
            f"the evaluation text has {batch.input_ids.shape[1]} tokens, not more than sinks "
            f"{sinks} + window {window}"
        )
    sources = copy_sources(batch.input_ids[0], MIN_MATCH)
    if not bool((sources >= 0).any()):
        raise ValueError("the evaluation text repeats no earlier passage: no copy positions")
    groups_total = sum(model.kv_heads_per_layer)
    total = 2 + len(budgets) * (seeds + 2) + 1 + seeds
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if on_step is not None:
            on_step(done, total)

    stats = long_text_statistics(
        model, calibration, max_tokens=n_tokens, window=(sinks, window), strict_window=True
    )
    step()
    ranking = ranked_groups(stats.roles)
    length = batch.input_ids.shape[1]
    full = evaluate(model, batch, sources)
    step()
    runs = [PlanRun("full", 0.0, None, [], 1.0, full.perplexity, full.copy_accuracy)]

    def run(kind: str, budget: float, seed: int | None, groups: list[Group]) -> None:
        plan = KVPlan(tuple(groups), sinks, window)
        with planned(model, plan):
            result = evaluate(model, batch, sources)
        saved = plan.kv_saved(model.kv_heads_per_layer, length)
        runs.append(PlanRun(kind, budget, seed, [list(g) for g in groups], saved,
                            result.perplexity, result.copy_accuracy))  # fmt: skip
        step()

    every = [(int(layer), int(g)) for layer, g, _ in ranking]
    for budget in budgets:
        count = max(1, round(budget * groups_total))
        run("chosen", budget, None, every[:count])
        for seed in range(seeds):
            run("random", budget, seed, random.Random(seed).sample(every, count))
        run("opposite", budget, None, every[::-1][:count])
    check = _retrieval_check(model, stats.roles, batch, sources, retrieval_k, seeds, step)
    return KVBudgetResult(model.name, length, sinks, window, int((sources >= 0).sum()),
                          ranking, runs, check)  # fmt: skip


def _retrieval_check(model, roles, batch, sources, k, seeds, step) -> RetrievalCheck | None:
    """Copy accuracy with the top-k retrieval heads zeroed, and with k random heads (seeds)."""
    if roles.retrieval is None:
        return None
    cells = sorted(((v, layer, h) for layer, row in enumerate(roles.retrieval)
                    for h, v in enumerate(row)), reverse=True)  # fmt: skip
    if k is None:
        k = max(1, sum(v >= RETRIEVAL for v, _, _ in cells))
    top = [(layer, h) for _, layer, h in cells[:k]]
    with ablated(model, top):
        masked = evaluate(model, batch, sources).copy_accuracy
    step()
    heads = [(layer, h) for _, layer, h in cells]
    others = []
    for seed in range(seeds):
        with ablated(model, random.Random(seed).sample(heads, k)):
            others.append(evaluate(model, batch, sources).copy_accuracy)
        step()
    return RetrievalCheck(k, [list(h) for h in top], masked, others)

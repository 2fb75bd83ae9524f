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
windows the lowest ones, and compares that plan with the full model, with the same number of
groups chosen at random (3 to 100 seeds) and with the opposite ranking (the highest errors
first). A plan's size is asked as a share of the K/V groups (``budgets``) or as the KV memory
it must save (``kv_saved`` = full / planned memory; every group holds the same K and V rows per
token, so memory is counted in group-tokens, see ``groups_for_saving``). The default texts are
two built-in copy tasks whose fillers come from disjoint halves of the document: the plan is
judged on text it was not ranked on. A second check after Wu et al. (2024): masking (zeroing
before W_O) the top-k retrieval heads against k random heads drawn from the other heads, on
copy accuracy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from headlab.attention.sites import KeyBudget
from headlab.heads.long_context import cut_text, long_text_statistics
from headlab.heads.repeats import context_copy_task, copy_sources
from headlab.heads.retrieval_check import (
    check_retrieval_k,
    most_heads,
    retrieval_check,
)
from headlab.limits import check_int, check_seed
from headlab.models.interface import HeadModel, TokenBatch
from headlab.models.output_rows import next_token_scores, output_rows
from headlab.results.corpus_roles_result import RoleRequest
from headlab.results.head_roles import MIN_MATCH, SINKS, WINDOW, HeadRoles
from headlab.results.kv_budget_result import KVBudgetResult, PlanRun
from headlab.results.long_context_result import TextContext

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
    """One forward of ``model`` on a one-text ``batch`` with copy positions ``sources`` (pos,).
    The logits and their float64 losses are taken ``LOGIT_ROWS`` positions at a time
    (``models.output_rows``): the (pos, vocab) logits are never whole."""
    top1, losses = next_token_scores(output_rows(model, batch), batch.input_ids)
    targets = batch.input_ids[0, 1:]  # (pos - 1,): the tokens predicted at positions 0..
    copies = sources[:-1] >= 0
    plain = ~copies
    perplexity = math.exp(float(losses[0, plain].sum()) / max(int(plain.sum()), 1))
    hits = top1[0, copies] == targets[copies]
    return Evaluation(perplexity, float(hits.double().mean()) if len(hits) else 0.0)


MIN_SEEDS = 3  # random plans of each size: fewer cannot show a spread
MAX_SEEDS = 100  # each seed is a model run per plan size: more is a typo, not an experiment


def check_budgets(budgets: Sequence[float], kv_saved: Sequence[float] = ()) -> None:
    """ValueError naming ``budgets`` unless each is in (0, 1], or ``kv_saved`` unless each is a
    finite number > 1; at least one of the two must list something."""
    if not budgets and not kv_saved:
        raise ValueError("budgets must list at least one share of K/V groups, got none")
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int | float) or not 0 < b <= 1:
            raise ValueError(f"budgets must be shares in (0, 1], got {b!r}")
    for r in kv_saved:
        if isinstance(r, bool) or not isinstance(r, int | float) or not 1 < r < math.inf:
            raise ValueError(f"kv_saved must be numbers > 1 (full / planned KV memory), got {r!r}")


def groups_for_saving(target: float, groups_total: int, n_tokens: int, kept: int) -> int:
    """The fewest windowed K/V groups (of ``groups_total``, each keeping ``kept`` of
    ``n_tokens`` keys) whose plan saves at least ``target`` = full / planned KV memory:

        full = G n,  planned = G n - c (n - kept)  =>  c = ceil(G (1 - 1/target) / (1 - kept/n))

    ValueError when even every group windowed saves less (at most n / kept)."""
    kept = min(kept, n_tokens)
    most = n_tokens / kept
    if target > most:
        raise ValueError(
            f"kv_saved={target:g} is out of reach: windowing every K/V group to {kept} of "
            f"{n_tokens} tokens saves {most:.2f}x at most"
        )
    exact = groups_total * (1 - 1 / target) / (1 - kept / n_tokens)
    return min(groups_total, math.ceil(exact - 1e-9))


@dataclass(frozen=True)
class KVBudgetRequest:
    """What ``kv_budget`` runs, checked before any model loads (ValueError naming the field):
    plan sizes (``budgets`` shares in (0, 1], ``kv_saved`` savings > 1, each within reach at
    ``n_tokens`` when it is given), the window (``sinks``, ``window``, shorter than
    ``n_tokens``), ``seeds`` random plans per size in [MIN_SEEDS, MAX_SEEDS], the copy task's
    ``seed`` and ``retrieval_k`` >= 1 (its upper bound, half the heads, needs the model)."""

    budgets: tuple[float, ...] = (0.25, 0.5, 0.75)
    kv_saved: tuple[float, ...] = ()
    n_tokens: int | None = None
    sinks: int = SINKS
    window: int = WINDOW
    seeds: int = MIN_SEEDS
    seed: int = 0
    retrieval_k: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "budgets", tuple(self.budgets))
        object.__setattr__(self, "kv_saved", tuple(self.kv_saved))
        check_budgets(self.budgets, self.kv_saved)
        RoleRequest(self.n_tokens, self.sinks, self.window).check(name="n_tokens")
        check_int("seeds", self.seeds, low=MIN_SEEDS, high=MAX_SEEDS)
        check_seed("seed", self.seed)
        if self.retrieval_k is not None:
            check_int("retrieval_k", self.retrieval_k)
        if self.n_tokens is not None:  # a saving out of reach at this length
            for target in self.kv_saved:
                groups_for_saving(target, 1, self.n_tokens, self.sinks + self.window)

    def length_for(self, max_positions: int) -> int:
        """The texts' length on a model of ``max_positions`` positions: ``n_tokens``, or all
        of them; ValueError naming ``n_tokens`` when it asks for more."""
        options = RoleRequest(self.n_tokens, self.sinks, self.window)
        return options.tokens_for(max_positions, name="n_tokens")


def ranked_groups(roles: HeadRoles) -> list[list[float]]:
    """[layer, group, window error] of every K/V group, lowest error first."""
    cells = [
        [layer, g, err]
        for layer, row in enumerate(roles.group_window_error)
        for g, err in enumerate(row)
    ]
    return sorted(cells, key=lambda c: (c[2], c[0], c[1]))


def model_runs(sizes: int, seeds: int) -> int:
    """How many model runs ``kv_budget`` makes for ``sizes`` plan sizes: the roles pass, the
    full model, per size the chosen, random and opposite plans, and the retrieval check."""
    return 2 + sizes * (seeds + 2) + 1 + seeds


def default_texts(model: HeadModel, n_tokens: int, seed: int, asked: bool) -> tuple[str, str]:
    """(calibration, held-out) built-in copy tasks of ``n_tokens`` tokens: the filler of one
    from the first half of the document, of the other from the second half (no shared filler
    word, ``repeats.copy_task``), both seeded by ``seed``. ``asked``: the user chose
    ``n_tokens``; otherwise the message of a context too short names the model's context."""
    hint = "give calibration_text= and evaluation_text="
    length = n_tokens if asked else None
    return tuple(
        context_copy_task(model, length, hint, seed=seed, part=part, parts=2).text
        for part in (0, 1)
    )


def kv_budget(
    model: HeadModel,
    request: KVBudgetRequest | None = None,
    *,
    budgets: Sequence[float] | None = None,
    kv_saved: Sequence[float] | None = None,
    n_tokens: int | None = None,
    sinks: int | None = None,
    window: int | None = None,
    seeds: int | None = None,
    seed: int | None = None,
    calibration_text: str | None = None,
    evaluation_text: str | None = None,
    retrieval_k: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> KVBudgetResult:
    """Rank, plan and verify (see the module docstring): ``request``, or its fields as
    keywords (None: the field's default; a keyword beside a request is refused).

    Plan sizes: each of ``budgets`` (a share of the K/V groups, rounded to a count) and each of
    ``kv_saved`` (a KV memory saving full / planned, turned into the fewest groups that reach
    it at the held-out text's length, ``groups_for_saving``); sizes that come out equal run
    once. ``seeds`` random plans per size (3 to 100). Texts default to the built-in copy task
    at ``n_tokens`` tokens (``default_texts``, seeded by ``seed``): calibration and held-out
    share no filler; a given text longer than ``n_tokens`` is cut, and ``held_out`` /
    ``calibration`` say so. ``retrieval_k``: how many retrieval heads to mask against as many
    random others, at most half the heads (``heads.retrieval_check``; default: those scoring
    >= 0.1, at least the top one, at most half the heads, the check's note saying how k was
    chosen). ``on_step(done, total)`` after each model run. Raises ValueError, before the model
    runs, for budgets outside (0, 1], a saving out of reach, fewer than 3 or more than 100
    seeds, a window or sink count out of range, a retrieval_k out of range, a text not longer
    than the window, or an evaluation text without copy positions."""
    asked = dict(
        budgets=budgets,
        kv_saved=kv_saved,
        n_tokens=n_tokens,
        sinks=sinks,
        window=window,
        seeds=seeds,
        seed=seed,
        retrieval_k=retrieval_k,
    )
    chosen = {name: value for name, value in asked.items() if value is not None}
    if request is None:
        request = KVBudgetRequest(**chosen)
    elif chosen:
        raise ValueError(
            f"{', '.join(chosen)} is the request's own: pass it in the KVBudgetRequest"
        )
    budgets, kv_saved, n_tokens = request.budgets, request.kv_saved, request.n_tokens
    sinks, window, seeds, seed = request.sinks, request.window, request.seeds, request.seed
    retrieval_k = request.retrieval_k
    if retrieval_k is not None:
        check_retrieval_k(model, retrieval_k)
    if model.objective_kind != "next-token":
        raise ValueError(f"{model.name} predicts no tokens: a KV budget needs a language model")
    asked = n_tokens is not None
    n_tokens = request.length_for(model.max_positions)
    if n_tokens <= sinks + window:
        length = f"n_tokens={n_tokens}" if asked else f"{model.name}'s context of {n_tokens} tokens"
        raise ValueError(
            f"{length} is not longer than sinks {sinks} + window {window}: every key is in the "
            "window"
        )
    texts = "calibration and held-out texts given"
    if calibration_text is None or evaluation_text is None:
        built = default_texts(model, n_tokens, seed, asked)
        texts = (
            f"built-in copy task, seed {seed}: calibration "
            f"{'given' if calibration_text else 'on the first half of the filler'}, held-out "
            f"{'given' if evaluation_text else 'on the second half'}"
        )
        calibration_text = calibration_text or built[0]
        evaluation_text = evaluation_text or built[1]
    batch, held_out = cut_text(model, evaluation_text, n_tokens)
    length = batch.input_ids.shape[1]
    if length <= sinks + window:
        raise ValueError(
            f"the evaluation text has {length} tokens, not more than sinks {sinks} + window "
            f"{window}"
        )
    sources = copy_sources(batch.input_ids[0], MIN_MATCH)
    if not bool((sources >= 0).any()):
        raise ValueError("the evaluation text repeats no earlier passage: no copy positions")
    groups_total = sum(model.kv_heads_per_layer)
    sizes: dict[int, float | None] = {}  # windowed groups -> the saving asked, if any
    for target in kv_saved:
        sizes[groups_for_saving(target, groups_total, length, sinks + window)] = target
    for budget in budgets:
        sizes.setdefault(max(1, round(budget * groups_total)), None)
    total = model_runs(len(sizes), seeds)
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if on_step is not None:
            on_step(done, total)

    stats = long_text_statistics(
        model, calibration_text, max_tokens=n_tokens, window=(sinks, window), strict_window=True
    )
    step()
    ranking = ranked_groups(stats.roles)
    full = evaluate(model, batch, sources)
    step()
    runs = [PlanRun("full", 0.0, None, [], 1.0, full.perplexity, full.copy_accuracy)]

    def run(kind: str, seed: int | None, groups: list[Group], target: float | None) -> None:
        plan = KVPlan(tuple(groups), sinks, window)
        with planned(model, plan):
            result = evaluate(model, batch, sources)
        saved = plan.kv_saved(model.kv_heads_per_layer, length)
        runs.append(
            PlanRun(
                kind,
                len(groups) / groups_total,
                seed,
                [list(g) for g in groups],
                saved,
                result.perplexity,
                result.copy_accuracy,
                target,
            )
        )
        step()

    every = [(int(layer), int(g)) for layer, g, _ in ranking]
    for count, target in sorted(sizes.items()):
        run("chosen", None, every[:count], target)
        for s in range(seeds):
            run("random", s, random.Random(s).sample(every, count), target)
        run("opposite", None, every[::-1][:count], target)
    check = None
    if stats.roles.retrieval is not None and most_heads(model) >= 1:
        check = retrieval_check(
            model,
            stats.roles.retrieval,
            retrieval_k,
            seeds,
            lambda: evaluate(model, batch, sources).copy_accuracy,
            step,
        )
    calibration = TextContext(len(stats.tokens), stats.text_tokens, stats.truncated)
    return KVBudgetResult(
        model.name,
        length,
        sinks,
        window,
        int((sources >= 0).sum()),
        ranking,
        runs,
        check,
        texts,
        held_out,
        calibration,
    )

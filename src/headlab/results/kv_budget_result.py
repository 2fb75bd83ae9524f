"""The ``model-kv-budget`` results file: plans of windowed K/V groups and what they cost
(``headlab.heads.kv_budget`` runs them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

from headlab.results.long_context_result import TextContext
from headlab.results.schema import Fields, problem


@dataclass(frozen=True)
class PlanRun:
    """One plan run: ``kind`` full | chosen | random | opposite (``seed`` for random) at
    ``budget`` (share of K/V groups windowed), its groups, the KV memory saved (full / planned)
    and the evaluation; ``target_kv_saved``: the KV memory saving the size was derived from
    (None: a share of groups was asked)."""

    kind: str
    budget: float
    seed: int | None
    groups: list[list[int]]
    kv_saved: float
    perplexity: float
    copy_accuracy: float
    target_kv_saved: float | None = None

    @classmethod
    def from_dict(cls, f: Fields) -> PlanRun:
        kind = f.str("kind")
        if kind not in KINDS:
            raise problem(f.at("kind"), " | ".join(KINDS), kind)
        seed = None if f.data.get("seed") is None else f.int("seed")
        target = None if f.data.get("target_kv_saved") is None else f.number("target_kv_saved", 1.0)
        groups = f.list("groups")
        for i, g in enumerate(groups):
            if not (isinstance(g, list) and len(g) == 2 and all(isinstance(x, int) for x in g)):
                raise problem(f"{f.at('groups')}[{i}]", "[layer, group]", g)
        return cls(
            kind,
            f.number("budget", 0.0, 1.0),
            seed,
            groups,
            f.number("kv_saved", 1.0),
            f.number("perplexity", 0.0),
            f.number("copy_accuracy", 0.0, 1.0),
            target,
        )


KINDS = ("full", "chosen", "random", "opposite")


@dataclass(frozen=True)
class RetrievalCheck:
    """Copy accuracy with the top-``k`` retrieval heads masked, against ``k`` random heads drawn
    from the others (one per seed); ``note`` says how k was chosen when it was not asked."""

    k: int
    heads: list[list[int]]
    copy_accuracy: float
    random_copy_accuracy: list[float]
    random_heads: list[list[list[int]]] = field(default_factory=list)
    note: str = ""

    @classmethod
    def from_dict(cls, f: Fields) -> RetrievalCheck:
        """ValueError naming the field unless ``heads`` and every draw of ``random_heads`` hold
        ``k`` heads."""
        note = f.str("note") if "note" in f.data else ""
        k = f.int("k", 1)
        heads = f.list("heads")
        if len(heads) != k:
            raise problem(f.at("heads"), f"k = {k} heads", f"{len(heads)} heads")
        drawn = f.list("random_heads") if "random_heads" in f.data else []
        for i, draw in enumerate(drawn):
            if not isinstance(draw, list) or len(draw) != k:
                raise problem(f"{f.at('random_heads')}[{i}]", f"k = {k} heads", draw)
        return cls(
            k,
            heads,
            f.number("copy_accuracy", 0.0, 1.0),
            [float(v) for v in f.numbers("random_copy_accuracy")],
            drawn,
            note,
        )


@dataclass(frozen=True)
class KVBudgetResult:
    """``runs``: the full model, then per plan size the chosen plan, the random ones and the
    opposite one; ``retrieval``: the masking check (None without retrieval heads);
    ``texts``: where the calibration and the held-out texts came from; ``held_out`` and
    ``calibration``: each text's tokens as used and before the cut (None in files written
    before they were recorded)."""

    KIND: ClassVar[str] = "model-kv-budget"

    model: str
    n_tokens: int
    sinks: int
    window: int
    copy_positions: int
    group_ranking: list[list[float]]  # [layer, group, window error], lowest error first
    runs: list[PlanRun] = field(default_factory=list)
    retrieval: RetrievalCheck | None = None
    texts: str = ""
    held_out: TextContext | None = None
    calibration: TextContext | None = None

    def __repr__(self) -> str:
        """One line: the runs and the baseline (every number is in ``to_dict``)."""
        return (
            f"KVBudgetResult({self.model!r}, {self.n_tokens} tokens, window {self.window}: "
            f"{len(self.runs)} plan runs, full perplexity {self.baseline().perplexity:.4g})"
        )

    def to_dict(self) -> dict:
        out = asdict(self)
        for name in ("retrieval", "held_out", "calibration"):
            if out[name] is None:
                out.pop(name)
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
        if sum(r.kind == "full" for r in runs) != 1:  # the baseline every other run is read by
            kinds = [r.kind for r in runs]
            raise problem(f.at("runs"), 'one run of kind "full" (the full model)', kinds)
        check = None
        if "retrieval" in data:
            check = RetrievalCheck.from_dict(f.object("retrieval"))
        texts = f.text("texts") if "texts" in data else ""
        held_out, calibration = (
            TextContext.from_dict(f.object(name)) if name in data else None
            for name in ("held_out", "calibration")
        )
        return cls(
            f.name("model"),
            f.int("n_tokens", 2),
            f.int("sinks"),
            f.int("window", 1),
            f.int("copy_positions"),
            ranking,
            runs,
            check,
            texts,
            held_out,
            calibration,
        )

    def baseline(self) -> PlanRun:
        return next(r for r in self.runs if r.kind == "full")

"""Result of ``experiments.induction_circuit``: a 2-layer toy's induction circuit over training.

``CircuitCheckpoint``: at one training step, the task's held-out loss and accuracy, the best
previous-token head of layer 0 and the best induction head of layer 1 (headlab's detectors, with
their scores), the K-composition of that pair beside the random baseline, and the exact
path-patching effect of the edge (previous-token head -> induction head's key input) on the
answer's log-probability, with the metric on the clean and corrupted runs, and the effect of
the whole K path (every layer-0 head -> layer-1 key edge patched at once; absent in older files).
``InductionFormation`` (KIND "induction-circuit"): one run per head count (``runs``), each a list
of checkpoints. Plain data: ``to_dict`` and a validating ``from_dict``; no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from headlab.results.circuit_edges import FaithfulnessCurve
from headlab.results.schema import Fields, problem
from headlab.results.summary_repr import summarised


@dataclass(frozen=True)
class CircuitCheckpoint:
    step: int
    loss: float
    accuracy: float
    previous_head: int  # head index in layer 0
    previous_score: float
    induction_head: int  # head index in layer 1
    induction_score: float
    k_composition: float
    k_baseline: float
    edge: str  # graph name, "0.p->1.i<k>"
    patching_effect: float  # metric(patched) - metric(clean)
    clean_metric: float
    corrupted_metric: float
    #: every layer-0 head -> layer-1 head key edge patched at once (None in older files)
    k_path_effect: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str) -> CircuitCheckpoint:
        f = Fields(data, where)
        return cls(
            f.int("step", 1),
            f.number("loss", 0.0),
            f.number("accuracy", 0.0, 1.0),
            f.int("previous_head"),
            f.number("previous_score", 0.0, 1.0),
            f.int("induction_head"),
            f.number("induction_score", 0.0, 1.0),
            f.number("k_composition", 0.0, 1.0),
            f.number("k_baseline", 0.0, 1.0),
            f.str("edge"),
            f.number("patching_effect"),
            f.number("clean_metric"),
            f.number("corrupted_metric"),
            f.number("k_path_effect") if data.get("k_path_effect") is not None else None,
        )


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties at their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


@dataclass(frozen=True)
class KEdges:
    """Every K edge 0.s -> 1.r<k> of the trained model (its last checkpoint), scored four
    ways: ``composition`` (weights), ``eap``, ``eap_ig`` (5 steps) and ``exact`` (path
    patching, the change in log p(answer)); with the detectors' ``previous_scores`` of the
    layer-0 heads and ``induction_scores`` of the layer-1 heads."""

    edges: list[str]
    composition: list[float]
    eap: list[float]
    eap_ig: list[float]
    exact: list[float]
    previous_scores: list[float]
    induction_scores: list[float]

    def to_dict(self) -> dict:
        return asdict(self)

    def top(self, method: str, n: int = 3) -> list[tuple[str, float]]:
        """The ``n`` edges of largest |score| by ``method`` (a field name), largest first."""
        values = getattr(self, method)
        order = sorted(range(len(values)), key=lambda i: -abs(values[i]))[:n]
        return [(self.edges[i], values[i]) for i in order]

    def spearman(self, method: str, against: str = "exact", absolute: bool = False) -> float:
        """Spearman correlation of two methods' scores over the edges (ties share their mean
        rank; ``absolute``: of their sizes, for composition, which has no sign); nan where
        either is constant."""
        first, second = getattr(self, method), getattr(self, against)
        if absolute:
            first, second = [abs(v) for v in first], [abs(v) for v in second]
        a, b = _ranks(first), _ranks(second)
        n = len(a)
        mean = (n + 1) / 2
        cov = sum((x - mean) * (y - mean) for x, y in zip(a, b, strict=True))
        var_a = sum((x - mean) ** 2 for x in a)
        var_b = sum((y - mean) ** 2 for y in b)
        return cov / (var_a * var_b) ** 0.5 if var_a > 0 and var_b > 0 else float("nan")

    @classmethod
    def from_dict(cls, data: dict, where: str) -> KEdges:
        f = Fields(data, where)
        edges = [str(e) for e in f.list("edges", True)]
        lists = {k: f.numbers(k) for k in ("composition", "eap", "eap_ig", "exact")}
        for key, values in lists.items():
            if len(values) != len(edges):
                raise problem(f.at(key), f"{len(edges)} numbers", len(values))
        return cls(
            edges,
            **lists,
            previous_scores=f.numbers("previous_scores"),
            induction_scores=f.numbers("induction_scores"),
        )


@dataclass(frozen=True)
class FormationRun:
    """One training run: ``heads`` per layer, its ``seed``, ``steps`` in all, the model it
    trained (``model``: what the transformers config was) and its ``checkpoints`` in step
    order."""

    heads: int
    seed: int
    steps: int
    model: str
    checkpoints: list[CircuitCheckpoint]
    #: every K edge of the last checkpoint, four ways (None in older files)
    k_edges: KEdges | None = None
    #: the top-n EAP-IG circuit's faithfulness over every edge at the last checkpoint, beside
    #: random circuits (None in older files)
    faithfulness: FaithfulnessCurve | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def phase_change(
        self, level: float = 0.5
    ) -> tuple[CircuitCheckpoint, CircuitCheckpoint] | None:
        """(the last checkpoint below ``level`` accuracy, the first at or above it): where the
        accuracy jumps (Olsson et al.'s phase change); None where it never reaches ``level`` or
        starts there."""
        for before, after in zip(self.checkpoints[:-1], self.checkpoints[1:], strict=True):
            if before.accuracy < level <= after.accuracy:
                return before, after
        return None

    def strongest_edge(self) -> CircuitCheckpoint:
        """The checkpoint whose edge has the patching effect of largest size."""
        return max(self.checkpoints, key=lambda c: abs(c.patching_effect))

    @classmethod
    def from_dict(cls, data: dict, where: str) -> FormationRun:
        f = Fields(data, where)
        points = [
            CircuitCheckpoint.from_dict(p.data, p.where) for p in f.objects("checkpoints", True)
        ]
        steps = [p.step for p in points]
        if steps != sorted(set(steps)):
            raise problem(f.at("checkpoints"), "checkpoints in increasing step order", steps)
        k_edges = None
        if data.get("k_edges") is not None:
            k_edges = KEdges.from_dict(f.object("k_edges").data, f.at("k_edges"))
        curve = None
        if data.get("faithfulness") is not None:
            curve = FaithfulnessCurve.from_dict(f.object("faithfulness").data, f.at("faithfulness"))
        return cls(
            f.int("heads", 1),
            f.int("seed"),
            f.int("steps", 1),
            f.name("model"),
            points,
            k_edges,
            curve,
        )


@summarised
@dataclass(frozen=True)
class InductionFormation:
    """``runs``: one ``FormationRun`` per head count and seed, on ``task`` (its ``metric``)."""

    KIND = "induction-circuit"

    task: str
    metric: str
    runs: list[FormationRun]

    def to_dict(self) -> dict:
        return asdict(self)

    def jump_steps(self, level: float = 0.5) -> dict[int, list[tuple[int, int | None]]]:
        """Per head count (in the runs' order), each run's (seed, the first checkpoint step at
        or above ``level`` accuracy after one below it, None where there is none): where each
        seed's phase change is."""
        found: dict[int, list[tuple[int, int | None]]] = {}
        for run in self.runs:
            jump = run.phase_change(level)
            found.setdefault(run.heads, []).append(
                (run.seed, None if jump is None else jump[1].step)
            )
        return found

    @classmethod
    def from_dict(cls, data: dict, where: str = "induction-circuit") -> InductionFormation:
        f = Fields(data, where)
        runs = [FormationRun.from_dict(r.data, r.where) for r in f.objects("runs", True)]
        return cls(f.str("task"), f.str("metric"), runs)


__all__ = ["CircuitCheckpoint", "FormationRun", "InductionFormation", "KEdges"]

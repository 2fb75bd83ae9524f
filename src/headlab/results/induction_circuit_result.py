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

from headlab.results.schema import Fields, problem


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
            f.int("step", 1), f.number("loss", 0.0), f.number("accuracy", 0.0, 1.0),
            f.int("previous_head"), f.number("previous_score", 0.0, 1.0),
            f.int("induction_head"), f.number("induction_score", 0.0, 1.0),
            f.number("k_composition", 0.0, 1.0), f.number("k_baseline", 0.0, 1.0),
            f.str("edge"), f.number("patching_effect"), f.number("clean_metric"),
            f.number("corrupted_metric"),
            f.number("k_path_effect") if data.get("k_path_effect") is not None else None,
        )  # fmt: skip


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
        return cls(f.int("heads", 1), f.int("seed"), f.int("steps", 1), f.str("model"), points)


@dataclass(frozen=True)
class InductionFormation:
    """``runs``: one ``FormationRun`` per head count, on ``task`` (its ``metric``)."""

    KIND = "induction-circuit"

    task: str
    metric: str
    runs: list[FormationRun]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "induction-circuit") -> InductionFormation:
        f = Fields(data, where)
        runs = [FormationRun.from_dict(r.data, r.where) for r in f.objects("runs", True)]
        return cls(f.str("task"), f.str("metric"), runs)


__all__ = ["CircuitCheckpoint", "FormationRun", "InductionFormation"]

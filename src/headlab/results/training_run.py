"""What one training run of the sweep produced (``headlab.experiments.train.run_one``): its
evaluation curve, the final per-head attention entropy, its parameter count and time, and the
rows of ``sweep.jsonl`` it writes."""

from __future__ import annotations

from dataclasses import dataclass

from headlab.results.jsonl_store import SweepRow
from headlab.results.run_config import RunConfig


@dataclass(frozen=True)
class EvalPoint:
    step: int
    loss: float
    accuracy: float


@dataclass(frozen=True)
class RunResult:
    """What a run produced: the curve (evaluations every eval_every steps and at the end), the
    final per-head attention entropy (layer-major, L*H floats; empty for talking heads, whose
    mixed weights are not distributions) and the parameter count."""

    config: RunConfig
    curve: list[EvalPoint]
    head_entropy: list[float]
    params: int
    seconds: float

    @property
    def final(self) -> EvalPoint:
        return self.curve[-1]

    def rows(self) -> list[dict]:
        """Rows of sweep.jsonl (schema in docs/experiments.md): one per evaluation point."""
        run_id, last = self.config.run_id, len(self.curve) - 1
        return [
            SweepRow(
                run_id,
                self.config,
                p.step,
                p.loss,
                p.accuracy,
                final=i == last,
                params=self.params,
                head_entropy=self.head_entropy if i == last else None,
                seconds=self.seconds if i == last else None,
            ).to_dict()
            for i, p in enumerate(self.curve)
        ]

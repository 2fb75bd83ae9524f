"""The model's own performance on a circuits task (``headlab.circuits.task_performance``).

``TaskPerformance``: the task, its metric, the number of pairs, the metric's mean on the clean
and on the corrupted inputs, the accuracy on the clean inputs (what it counts depends on the
metric: see ``circuits.task_performance``) and whether it reaches the bar for "the model does
this task". Plain data: ``to_dict`` and a validating ``from_dict``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from headlab.results.schema import Fields, problem

TASK_METRICS = ("logprob", "logit_diff", "prob_diff", "cls_projection")


@dataclass(frozen=True)
class TaskPerformance:
    task: str
    metric: str
    n_pairs: int
    clean: float
    corrupted: float
    accuracy: float
    does_task: bool

    def says(self) -> str:
        """One line for a person: the accuracy and whether the model does the task."""
        verdict = "does the task" if self.does_task else "does NOT do the task"
        return (
            f"{self.task}: accuracy {self.accuracy:.0%} on {self.n_pairs} clean pairs, "
            f"{self.metric} {self.clean:.3g} clean vs {self.corrupted:.3g} corrupted: the "
            f"model {verdict}"
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "task-performance") -> TaskPerformance:
        fields = Fields(data, where)
        metric = fields.str("metric")
        if metric not in TASK_METRICS:
            raise problem(fields.at("metric"), f"one of {', '.join(TASK_METRICS)}", metric)
        return cls(
            task=fields.str("task"),
            metric=metric,
            n_pairs=fields.int("n_pairs", 1),
            clean=fields.number("clean"),
            corrupted=fields.number("corrupted"),
            accuracy=fields.number("accuracy", 0.0, 1.0),
            does_task=fields.bool("does_task"),
        )

"""The circuits' result types (plain data with ``to_dict`` / ``from_dict``), kept here until
the results package (``headlab.results``) is their home."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class EdgeScores:
    """One score per edge: ``method`` ("path_patching", "eap", "eap-ig"), the ``metric`` kind,
    ``edges`` (graph.py names) and their ``scores`` (the change in the metric when the edge is
    patched, or its attribution), with the metric on the clean and corrupted runs."""

    method: str
    metric: str
    edges: list[str]
    scores: list[float]
    clean_metric: float
    corrupted_metric: float

    def __post_init__(self) -> None:
        if len(self.edges) != len(self.scores):
            raise ValueError(
                f"edges and scores must have one length, got {len(self.edges)} and "
                f"{len(self.scores)}"
            )

    def top(self, n: int) -> list[tuple[str, float]]:
        """The ``n`` edges of largest |score|, largest first."""
        order = sorted(range(len(self.edges)), key=lambda i: -abs(self.scores[i]))
        return [(self.edges[i], self.scores[i]) for i in order[:n]]

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> EdgeScores:
        """ValueError for a missing field or a score that is not a finite number."""
        fields = ("method", "metric", "edges", "scores", "clean_metric", "corrupted_metric")
        missing = [f for f in fields if f not in data]
        if missing:
            raise ValueError(f"edge scores lack {', '.join(missing)}, got {sorted(data)}")
        scores = [float(s) for s in data["scores"]]
        if not all(math.isfinite(s) for s in scores):
            raise ValueError("edge scores must be finite numbers")
        return EdgeScores(
            str(data["method"]), str(data["metric"]), [str(e) for e in data["edges"]], scores,
            float(data["clean_metric"]), float(data["corrupted_metric"]),
        )  # fmt: skip


__all__ = ["EdgeScores"]

"""What each head attends to (``headlab.model heads``): the ``model-heads`` results file.

Measured by ``headlab.heads.statistics.head_statistics``; the metrics are described there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from headlab.results.schema import Fields, are_short_texts

PLAIN_METRICS = ("entropy", "max_weight", "self", "prev", "distance", "contribution_norm")
DETECTOR_NAMES = ("previous_token", "duplicate_token", "induction")  # headlab.heads.detectors


class MissingStatistic(KeyError):
    """A statistic the result does not hold; its message names the ones it holds and, for a
    detector, what to pass to measure it. A KeyError, printed as a sentence."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class HeadStatistics:
    """metrics[name]: (layer, head) nested lists of floats; see the module docstring.

    detectors[name]: (layer, head) scores in [0, 1] of the head kinds of ``detectors`` (decoders).
    first_token: the metric that is the weight on the first token (``HeadModel.first_token``):
        the first special position in ``metrics`` (``metric_names`` puts it first), so that a
        results file needs no field for it.
    notes: one line per statistic left out and why (``UNMEASURED``), and the model's notes on
        its layers (``layer_notes``: a hybrid's blocks without heads); empty for most models.
    """

    KIND: ClassVar[str] = "model-heads"

    model: str
    n_texts: int
    num_layers: int
    num_heads: int
    metrics: dict[str, list[list[float]]]
    detectors: dict[str, list[list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def first_token(self) -> str | None:
        special = [name for name in self.metrics if name not in PLAIN_METRICS]
        return special[0] if special else None

    def __repr__(self) -> str:
        """One line, however many heads: the model, its size, the strongest head of the first
        statistic (a results file's every number is in ``to_dict``)."""
        name = next(iter(self.metrics))
        layer, head, value = self.top(name, 1)[0]
        return (
            f"HeadStatistics({self.model!r}: {self.num_layers} layers x {self.num_heads} "
            f"heads, {len(self.metrics)} statistics, {len(self.detectors)} detectors, "
            f"{self.n_texts} texts; highest {name}: layer {layer}, head {head}, "
            f"{value:.3g})"
        )

    def to_dict(self) -> dict:
        out = {
            "model": self.model,
            "n_texts": self.n_texts,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "metrics": self.metrics,
        }
        if self.detectors:
            out["detectors"] = self.detectors
        if self.notes:
            out["notes"] = self.notes
        return out

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-heads") -> HeadStatistics:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        layers, heads = f.size("num_layers"), f.size("num_heads")
        grids = {}
        for part in ("metrics", "detectors"):
            if part == "detectors" and part not in data:
                break
            group = f.object(part, nonempty=part == "metrics")
            grids[part] = {str(k): group.grid(k, layers, heads) for k in group.data}
        widest = max(len(row) for part in grids.values() for grid in part.values() for row in grid)
        f.held("num_heads", heads, widest, "the heads of the widest layer its grids hold")
        notes = []
        if "notes" in data:
            notes = f.get("notes", "a list of strings", are_short_texts)
        return cls(
            f.name("model"),
            f.int("n_texts"),
            layers,
            heads,
            grids["metrics"],
            grids.get("detectors", {}),
            notes,
        )

    def top(self, name: str, count: int = 5) -> list[tuple[int, int, float]]:
        """The ``count`` heads with the highest ``name`` (a metric or a detector), best first;
        MissingStatistic (a KeyError) naming what the result holds when it has no ``name``."""
        grid = self.detectors.get(name) or self.metrics.get(name)
        if grid is None:
            raise MissingStatistic(self._missing(name))
        cells = [(l, h, v) for l, row in enumerate(grid) for h, v in enumerate(row)]
        return sorted(cells, key=lambda c: -c[2])[:count]

    def _missing(self, name: str) -> str:
        held = ", ".join([*self.metrics, *self.detectors])
        line = f"no statistic {name!r} in these results: they hold {held}"
        if name in DETECTOR_NAMES:
            line += (
                "; the detectors (previous_token, duplicate_token, induction) are measured on "
                "decoders when detector_length is not 0: head_statistics(model, texts, "
                "detector_length=50), or headlab model heads --detector-length 50"
            )
        return line

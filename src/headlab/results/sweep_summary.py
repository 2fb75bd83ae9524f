"""Per head count summaries of a results file.

``summarize`` groups final rows by (task, num_heads, num_kv_heads, head_dim) and reports the mean
and the sample standard deviation over seeds; ``plot_series`` groups a task's rows into the lines
of its figure (drawn by ``headlab.report.figures.sweep_figure``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from headlab.results.jsonl_store import final_rows
from headlab.results.schema import Fields, problem

ATTENTIONS = ("plain", "talking-heads")


@dataclass(frozen=True)
class SummaryRow:
    """One head configuration of a task over its seeds: the parameter count, the mean and the
    sample standard deviation of the final loss and accuracy, the mean per-head entropy."""

    task: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    params: int
    seeds: int
    loss_mean: float
    loss_std: float
    accuracy_mean: float
    accuracy_std: float
    entropy_mean: float | None  # mean over heads (and layers) of the per-head entropy, nats
    attention: str = "plain"  # or "talking-heads"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> SummaryRow:
        """ValueError naming the field unless the sizes are >= 1, the K/V heads divide the
        heads, the statistics are finite (accuracy in [0, 1], standard deviations >= 0); a row
        without ``attention`` is of plain heads."""
        heads, kv_heads = f.size("num_heads"), f.size("num_kv_heads")
        if heads % kv_heads:
            raise problem(f.at("num_kv_heads"), f"a divisor of {heads} heads", kv_heads)
        entropy = None if f.data.get("entropy_mean") is None else f.number("entropy_mean", 0.0)
        attention = "plain"  # rows written before talking heads have no "attention"
        if "attention" in f.data:
            attention = f.get(
                "attention", f"one of {', '.join(ATTENTIONS)}", lambda v: v in ATTENTIONS
            )
        return cls(
            task=f.str("task"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=f.size("head_dim"),
            params=f.int("params", 1),
            seeds=f.int("seeds", 1),
            loss_mean=f.number("loss_mean"),
            loss_std=f.number("loss_std", 0.0),
            accuracy_mean=f.number("accuracy_mean", 0.0, 1.0),
            accuracy_std=f.number("accuracy_std", 0.0),
            entropy_mean=entropy,
            attention=attention,
        )


def _std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(rows: list[dict]) -> list[SummaryRow]:
    """SummaryRows sorted by task, then head count, then K/V heads."""
    groups: dict[tuple, list[dict]] = {}
    for r in final_rows(rows):
        c = r["config"]
        key = (c["task"], c["num_heads"], c["num_kv_heads"], c["head_dim"])
        groups.setdefault((*key, c.get("attention", "plain")), []).append(r)
    out = []
    for (task, h, g, d, attention), runs in sorted(groups.items()):
        losses = [r["loss"] for r in runs]
        accs = [r["accuracy"] for r in runs]
        ents = [statistics.fmean(r["head_entropy"]) for r in runs if r.get("head_entropy")]
        out.append(
            SummaryRow(
                task=task,
                num_heads=h,
                num_kv_heads=g,
                head_dim=d,
                params=runs[0]["params"],
                seeds=len(runs),
                loss_mean=statistics.fmean(losses),
                loss_std=_std(losses),
                accuracy_mean=statistics.fmean(accs),
                accuracy_std=_std(accs),
                entropy_mean=statistics.fmean(ents) if ents else None,
                attention=attention,
            )
        )
    return out


def plot_series(summary: list[SummaryRow], task: str) -> dict[int | str | None, list[SummaryRow]]:
    """The lines of one task's panel: one per K/V setting, None = G = H (full multi-head), an
    int = that fixed number of K/V heads (GQA / MQA), "talking-heads" for talking heads; each
    line's rows by head count."""
    series: dict[int | str | None, list[SummaryRow]] = {}
    for s in summary:
        if s.task == task:
            kv = None if s.num_kv_heads == s.num_heads else s.num_kv_heads
            kv = s.attention if s.attention != "plain" else kv
            series.setdefault(kv, []).append(s)
    return series

"""Per head count summaries of a results file, and the figure.

``summarize`` groups final rows by (task, num_heads, num_kv_heads, head_dim) and reports the mean
and the sample standard deviation over seeds; ``plot_sweep`` draws final accuracy and loss against
the head count (one column per task) and writes a PNG atomically.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from headlab.experiments.results import final_rows, read_rows
from headlab.files import save_figure
from headlab.output_policy import Kind, check_output

SWEEP_FIGURE_KIND = Kind.png("sweep-plot")


@dataclass(frozen=True)
class SummaryRow:
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


def plot_sweep(results: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Final accuracy and loss (mean +- std over seeds) against head count, per task -> PNG.

    FileNotFoundError when ``results`` is missing; ValueError when it has no finished run;
    OutputRefused when ``out`` is not a path headlab may write a sweep figure to (the results
    file itself, a user's file: checked before plotting).
    """
    check_output(out, SWEEP_FIGURE_KIND, force=force, argument="out")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = Path(results)
    if not results.is_file():
        raise FileNotFoundError(f"results file not found: {results}")
    summary = summarize(read_rows(results))
    if not summary:
        raise ValueError(f"{results} holds no finished run, expected at least one")
    tasks = sorted({s.task for s in summary})
    fig, axes = plt.subplots(2, len(tasks), figsize=(4.2 * len(tasks), 6.4), squeeze=False)
    for col, task in enumerate(tasks):
        series = plot_series(summary, task)
        ticks = sorted({s.num_heads for s in summary if s.task == task})
        for kv, rows in series.items():
            label = "G = H" if kv is None else kv if isinstance(kv, str) else f"G = {kv}"
            hs = [r.num_heads for r in rows]
            for row, (mean, std, name) in enumerate(
                (
                    ([r.accuracy_mean for r in rows], [r.accuracy_std for r in rows], "accuracy"),
                    ([r.loss_mean for r in rows], [r.loss_std for r in rows], "loss"),
                )
            ):
                ax = axes[row][col]
                ax.errorbar(hs, mean, yerr=std, marker="o", capsize=3, label=label)
                ax.set_xscale("log", base=2)
                ax.set_xticks(ticks, [str(h) for h in ticks])
                ax.minorticks_off()
                ax.set_xlabel("heads (d_model fixed)")
                ax.set_ylabel(f"final {name} (mean ± std over seeds)")
        axes[0][col].set_title(task)
        if len(series) > 1:
            axes[0][col].legend()
    fig.tight_layout()
    return save_figure(fig, out, SWEEP_FIGURE_KIND, force=force, argument="out", dpi=110)

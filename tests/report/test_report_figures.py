"""The figures: one colour scale and one colour bar where panels compare, labelled tokens,
legends outside the data, head-count ticks at the counts used."""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

from headlab.analysis.coupling import coupling_summary
from headlab.analysis.text_attention import seeded_text_attention
from headlab.report import figures
from headlab.results.sweep_summary import SummaryRow


def _drawn(fig):
    FigureCanvasAgg(fig).draw()
    return fig.canvas.get_renderer()


def _colour_bars(fig) -> list:
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


def test_coupling_panels_share_one_scale_and_one_colour_bar() -> None:
    fig = figures.coupling_figure(coupling_summary(d_model=12, num_heads=3, seq_len=5).to_dict())
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2 and len(_colour_bars(fig)) == 1
    limits = {ax.images[0].get_clim() for ax in panels}
    assert len(limits) == 1 and limits.pop()[0] == 0.0
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["0", "1", "2"]


def test_attention_figure_labels_its_tokens_and_has_a_colour_bar() -> None:
    tokens = ["the", "cat", "sat", "on", "the", "mat"]
    views = seeded_text_attention(tokens, d_model=12, num_heads=3).views
    fig = figures.attention_figure("t", tokens, views)
    assert len(_colour_bars(fig)) == 1
    panel = fig.axes[0]
    assert [t.get_text() for t in panel.get_yticklabels()] == tokens
    assert [t.get_text() for t in panel.get_xticklabels()] == tokens


def test_attention_figure_labels_every_nth_token_of_a_long_text() -> None:
    tokens = [f"w{i}" for i in range(100)]
    views = seeded_text_attention(tokens, d_model=12, num_heads=3).views
    labels = [
        t.get_text() for t in figures.attention_figure("t", tokens, views).axes[0].get_yticklabels()
    ]
    assert 10 <= len(labels) <= 24 and labels[0] == "w0" and labels[1] == "w5"


def _row(task: str, h: int, g: int, acc: float) -> SummaryRow:
    return SummaryRow(task, h, g, 16 // h, 99, 2, 1.0 - acc, 0.01, acc, 0.02, None)


def test_sweep_legend_is_outside_every_axes_and_ticks_are_the_head_counts() -> None:
    rows = [_row(t, h, g, 0.2 * h) for t in ("a", "b") for h in (1, 2, 4) for g in {h, 1}]
    fig = figures.sweep_figure(rows)
    renderer = _drawn(fig)
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent(renderer))
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]


def test_collapse_legends_do_not_cover_the_axes() -> None:
    collapse = {
        "all_layers": [
            {"num_heads": h, "mean_cosine": 1 / h, "nn_agreement": 1.0} for h in (1, 12)
        ],
        "per_layer": [
            {"layer": l, "num_heads": 1, "mean_cosine": 0.5, "nn_agreement": 0.9} for l in range(3)
        ],
    }
    fig = figures.collapse_curve(collapse)
    renderer = _drawn(fig)
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent(renderer)
        assert not legend.overlaps(ax.get_window_extent(renderer))


def test_heads_grid_has_a_colour_bar_per_statistic() -> None:
    heads = {"model": "m", "n_texts": 2, "metrics": {"a": np.eye(3).tolist(), "b": [[1, 2], [3]]}}
    fig = figures.heads_grid(heads)
    assert len(_colour_bars(fig)) == 2


def test_heads_grid_ticks_are_whole_layers_and_heads() -> None:
    heads = {"model": "m", "n_texts": 2, "metrics": {"a": np.ones((3, 5)).tolist()}}
    fig = figures.heads_grid(heads)
    _drawn(fig)
    panel = fig.axes[0]
    low, high = sorted(panel.get_ylim())
    assert [t for t in panel.get_yticks() if low <= t <= high] == [0, 1, 2]  # not 0.5, 1.5

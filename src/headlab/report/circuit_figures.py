"""Figures of ``headlab circuits``: the circuit drawn on the model's graph, and its faithfulness
curve against random circuits.

Both take a ``CircuitRun`` (as measured or read back through ``from_dict``) and return a
matplotlib Figure (no pyplot); ``--figure``/``--faithfulness-figure`` write them and the report
embeds them. The graph: layers left to right (the embeddings at the left, the logits at the
right), each layer's query heads as a column of dots, its MLP as a square under them; in a GQA
layer the query heads of one K/V group are joined by a shaded box labelled ``gG``, where the
group's k and v edges land. An encoder-decoder's graph (``CircuitRun.cross_heads_per_layer``)
is drawn the same way over its blocks in run order, its two streams shaded apart: the
encoder's embeddings and blocks, then the decoder's embeddings and blocks, each decoder block's
cross-attention heads (``L.xH``) stacked over its self-attention heads, where the encoder's
edges into their key and value inputs land. Edges of the circuit (the top n) are lines from
sender to receiver, width by |score|, colour by sign, style by input (q solid, k dashed, v
dotted, else solid grey for MLPs and logits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from headlab.report.figures import COLOURS, GRID, INK, legend_outside, style_axes
from headlab.results.circuit_edges import FaithfulnessCurve
from headlab.results.circuit_run import CircuitRun

POSITIVE, NEGATIVE = COLOURS[0], COLOURS[1]
STYLES = {"q": "-", "k": "--", "v": ":"}
GROUP_SHIFT = 0.17  # a K/V group's node sits left of its query heads, inside its box
MLP_Y = -1.2  # the MLPs' row, under the heads
CROSS_GAP = 0.8  # between a decoder block's self-attention heads and its cross-attention's


@dataclass
class _Layout:
    """Where each node sits (``where``), each column of heads (x, the y of each of its heads:
    self-attention, then cross-attention), the embeddings and logits (``ends``), the axes'
    ticks and limits, and the shaded bands of an encoder-decoder's streams (x from, x to,
    name)."""

    where: dict[str, tuple[float, float]]
    columns: list[tuple[float, list[float]]]
    ends: list[str]
    xticks: tuple[list[float], list[str]]
    yticks: tuple[list[float], list[str]]
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    bands: list[tuple[float, float, str]] = field(default_factory=list)


def _every(count: int, most: int) -> range:
    return range(0, count, max(1, count // most))


def _decoder_layout(run: CircuitRun) -> _Layout:
    """One stream: x the layer (embed -1, logits L), y the head (MLP below them); a K/V
    group's node left of its query heads."""
    layers = len(run.heads_per_layer)
    tallest = max(run.heads_per_layer)
    where: dict[str, tuple[float, float]] = {"embed": (-1.0, (tallest - 1) / 2)}
    for layer, heads in enumerate(run.heads_per_layer):
        group = heads // run.kv_heads_per_layer[layer]
        for h in range(heads):
            where[f"{layer}.{h}"] = (float(layer), float(h))
        for g in range(run.kv_heads_per_layer[layer]):
            where[f"{layer}.g{g}"] = (layer - GROUP_SHIFT, g * group + (group - 1) / 2)
        where[f"mlp.{layer}"] = (float(layer), MLP_Y)
    where["logits"] = (float(layers), (tallest - 1) / 2)
    step = max(1, layers // 15)
    shown = range(0, layers, step)
    return _Layout(
        where,
        [(float(layer), list(range(heads))) for layer, heads in enumerate(run.heads_per_layer)],
        ["embed", "logits"],
        ([-1, *shown, layers], ["emb", *(str(i) for i in shown), "out"]),
        ([MLP_Y, *_every(tallest, 12)], ["mlp", *(str(h) for h in _every(tallest, 12))]),
        (-1.6, layers + 0.6),
        (-2.0, tallest + 0.4),
    )


def _stream_layout(run: CircuitRun, cross: list[int]) -> _Layout:
    """Two streams, blocks in run order: the encoder's embeddings, its blocks, the decoder's
    embeddings, its blocks, the logits, left to right; in a decoder block the cross-attention's
    heads (``L.xH``) stacked over its self-attention's, where the encoder's edges into their key
    and value inputs land."""
    blocks = len(run.heads_per_layer)
    encoder = next((b for b, c in enumerate(cross) if c), blocks)
    tallest = max(run.heads_per_layer)
    crossing = max(cross)
    middle = (tallest - 1) / 2
    where: dict[str, tuple[float, float]] = {"embed.encoder": (-1.0, middle)}
    columns = []
    for block, heads in enumerate(run.heads_per_layer):
        x = float(block if block < encoder else block + 1)  # the decoder's embeddings between
        ys = [float(h) for h in range(heads)] + [
            tallest - 1 + CROSS_GAP + h for h in range(cross[block])
        ]
        columns.append((x, ys))
        for h in range(heads):
            where[f"{block}.{h}"] = (x, float(h))
        for h in range(cross[block]):
            where[f"{block}.x{h}"] = (x, ys[heads + h])
        where[f"mlp.{block}"] = (x, MLP_Y)
    where["embed.decoder"] = (float(encoder), middle)
    where["logits"] = (float(blocks + 1), middle)
    xs = [x for x, _ in columns]
    top = tallest - 1 + CROSS_GAP + crossing
    y_cross = [tallest - 1 + CROSS_GAP + h for h in _every(crossing, 6)]
    return _Layout(
        where,
        columns,
        ["embed.encoder", "embed.decoder", "logits"],
        (
            [-1.0, *xs, float(encoder), float(blocks + 1)],
            ["emb", *(str(b) for b in range(blocks)), "emb", "out"],
        ),
        (
            [MLP_Y, *_every(tallest, 12), *y_cross],
            [
                "mlp",
                *(str(h) for h in _every(tallest, 12)),
                *(f"x{h}" for h in _every(crossing, 6)),
            ],
        ),
        (-2.1, blocks + 1.6),  # room for "embed.encoder" centred on its diamond
        (-2.0, top + 0.6),
        [(-1.95, encoder - 0.55, "encoder"), (encoder - 0.45, blocks + 1.45, "decoder")],
    )


def _layout(run: CircuitRun) -> _Layout:
    cross = run.cross_heads_per_layer
    return _decoder_layout(run) if cross is None else _stream_layout(run, cross)


def _split(edge: str) -> tuple[str, str, str]:
    sender, rest = edge.split("->", 1)
    receiver, _, tail = rest.partition("<")
    return sender, receiver, tail.rstrip(">")


def _groups(ax, run: CircuitRun) -> None:
    """GQA: a box per K/V group of a layer, where its k and v edges land."""
    layers = len(run.heads_per_layer)
    for layer, heads in enumerate(run.heads_per_layer):
        kv = run.kv_heads_per_layer[layer]
        if kv == heads:
            continue
        size = heads // kv
        for g in range(kv):
            ax.add_patch(
                FancyBboxPatch(
                    (layer - 0.28, g * size - 0.35),
                    0.5,
                    size - 0.3,
                    boxstyle="round,pad=0.02",
                    facecolor="#eef1f6",
                    edgecolor=GRID,
                    zorder=0,
                )
            )
            centre = g * size + (size - 1) / 2
            ax.scatter(
                [layer - GROUP_SHIFT],
                [centre],
                s=18,
                marker="s",
                zorder=2,
                facecolor="white",
                edgecolor="#9aa5b1",
            )
            if layers <= 16:
                ax.text(layer - 0.26, g * size + size - 0.55, f"g{g}", fontsize=6, color="#6b7a8f")


def _bands(ax, layout: _Layout) -> None:
    """An encoder-decoder's two streams: a shaded band each, named at its top."""
    for n, (start, stop, name) in enumerate(layout.bands):
        ax.axvspan(start, stop, color="#f4f6f9" if n % 2 == 0 else "#eef3ee", zorder=0)
        ax.text(
            (start + stop) / 2,
            layout.ylim[1] - 0.15,
            name,
            ha="center",
            va="top",
            fontsize=8,
            color="#6b7a8f",
        )


def _edges(ax, top: list[tuple[str, float]], where: dict) -> None:
    """The circuit's edges, width by |score|, colour by sign, style by input."""
    largest = max((abs(s) for _, s in top), default=0.0) or 1.0
    for edge, score in reversed(top):  # largest drawn last, on top
        sender, receiver, input_ = _split(edge)
        if sender not in where or receiver not in where:
            continue
        # an arc, not a straight line: a line between heads of far layers runs through the
        # heads of the layers between at the same height
        ax.add_patch(
            FancyArrowPatch(
                where[sender],
                where[receiver],
                arrowstyle="-",
                connectionstyle="arc3,rad=0.18",
                linestyle=STYLES.get(input_, "-"),
                linewidth=0.6 + 3.4 * abs(score) / largest,
                alpha=0.85,
                zorder=3,
                color=POSITIVE if score >= 0 else NEGATIVE,
            )
        )


def _nodes(ax, top: list[tuple[str, float]], layout: _Layout) -> None:
    """The circuit's nodes dark over the faint ones, and the ends of its strongest edges named."""
    where = layout.where
    ends = {node for edge, _ in top for node in _split(edge)[:2] if node in where}
    for node in ends - set(layout.ends):
        x, y = where[node]
        square = node.startswith("mlp") or ".g" in node
        ax.scatter([x], [y], s=22, color=INK, zorder=4, marker="s" if square else "o")
    named = []
    for edge, _ in top[:5]:  # name the ends of the strongest edges, each once
        named += [n for n in _split(edge)[:2] if n not in named and n not in layout.ends]
    for node in named:
        if node in where:
            x, y = where[node]
            box = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"}
            ax.text(
                x + 0.12, y + 0.2, node, fontsize=9, color=INK, zorder=5, bbox=box | {"alpha": 0.8}
            )


def circuit_graph_figure(run: CircuitRun) -> Figure:
    """The top-``run.top`` edges of ``run`` on the model's graph (module docstring)."""
    layout = _layout(run)
    columns = len(layout.columns) + len(layout.ends)
    rows = layout.ylim[1] - layout.ylim[0] - 0.4  # a decoder's: its tallest layer's heads + 2
    width = min(16.0, 3.0 + 0.55 * columns)
    height = min(12.0, 2.4 + 0.32 * rows)
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    _bands(ax, layout)
    _groups(ax, run)
    for x, heads in layout.columns:  # heads off the circuit: faint, so that an edge over one
        ax.scatter([x] * len(heads), heads, s=8, color="#d3d9e0", zorder=1)  # is not read as
        ax.scatter([x], [MLP_Y], s=14, marker="s", color="#d3d9e0", zorder=1)  # ending there
    for name in layout.ends:
        x, y = layout.where[name]
        ax.scatter([x], [y], s=40, marker="D", color=INK, zorder=2)
        ax.text(x, y + 0.6, name, ha="center", fontsize=8, color=INK)
    top = run.top_edges()
    _edges(ax, top, layout.where)
    _nodes(ax, top, layout)
    ax.set_xticks(*layout.xticks)
    ax.set_yticks(*layout.yticks)
    ax.set_xlabel("layer" if run.cross_heads_per_layer is None else "block (run order)", color=INK)
    ax.set_ylabel(
        "query head" if run.cross_heads_per_layer is None else "head (xH: cross)", color=INK
    )
    style_axes(ax)
    ax.grid(False)
    ax.set_xlim(*layout.xlim)
    ax.set_ylim(*layout.ylim)
    handles = [
        Line2D([], [], color=POSITIVE, linewidth=2, label="score > 0"),
        Line2D([], [], color=NEGATIVE, linewidth=2, label="score < 0"),
        *(Line2D([], [], color=INK, linestyle=s, label=f"into {i}") for i, s in STYLES.items()),
    ]
    legend_outside(ax, handles=handles)
    steps = f", m={run.steps}" if run.steps else ""
    ax.set_title(
        f"{run.model}: top {len(top)} edges, {run.task}, {run.method}{steps}",
        fontsize=9,
        color=INK,
        loc="left",
    )
    return fig


def faithfulness_figure(run: CircuitRun) -> Figure:
    """Faithfulness of the top-n circuits of ``run`` over the fraction of edges kept, against
    its random circuits (each seed, and their mean), with MIB's CPR and CMD in the legend.
    ValueError when ``run`` has no curve."""
    curve = run.faithfulness
    if curve is None:
        raise ValueError("the run has no faithfulness curve (run it with --faithfulness-figure)")
    return faithfulness_curves_figure(
        [curve], f"{run.model}, {run.task}: the circuit against random circuits of its size"
    )


def faithfulness_curves_figure(curves: list[FaithfulnessCurve], title: str) -> Figure:
    """The curves (say top-n and greedy, of one graph) over the fraction of edges kept (log
    axis), against the random circuits of the first (each seed, and their mean), with MIB's CPR
    and CMD in the legend."""
    if not curves:
        raise ValueError("no faithfulness curve to draw")
    fig = Figure(figsize=(7.5, 3.6), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    first = curves[0]
    x = [100 * f for f in first.fractions]
    seeds = len(first.random_cpr)
    for s in range(seeds):
        ax.plot(
            x,
            [r[s] for r in first.random],
            color="#9aa5b1",
            linewidth=0.8,
            alpha=0.7,
            label="random circuits" if s == 0 else None,
        )
    mean = [sum(r) / len(r) for r in first.random]
    random_cpr = sum(first.random_cpr) / seeds
    random_cmd = sum(first.random_cmd) / seeds
    ax.plot(
        x,
        mean,
        "o--",
        color=COLOURS[5],
        markersize=3,
        label=f"random mean: CPR {random_cpr:.3f}, CMD {random_cmd:.3f}",
    )
    for n, curve in enumerate(curves):
        ax.plot(
            [100 * f for f in curve.fractions],
            curve.faithfulness,
            "o-" if n == 0 else "s-",
            color=(POSITIVE, NEGATIVE, COLOURS[2])[n % 3],
            markersize=4,
            label=f"{curve.selection} {curve.method}: CPR {curve.cpr:.3f}, CMD {curve.cmd:.3f}",
        )
    ax.axhline(1.0, color=INK, linewidth=0.6)
    ax.axhline(0.0, color=INK, linewidth=0.6)
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{v:g}%" for v in x], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel(f"edges kept (of {first.edges})", color=INK)
    ax.set_ylabel("faithfulness", color=INK)
    ax.set_title(title, fontsize=9, color=INK, loc="left")
    style_axes(ax)
    legend_outside(ax, fontsize=7)
    return fig


__all__ = ["circuit_graph_figure", "faithfulness_curves_figure", "faithfulness_figure"]

"""Figures of ``headlab circuits``: the circuit drawn on the model's graph, and its faithfulness
curve against random circuits.

Both take a ``CircuitRun`` (as measured or read back through ``from_dict``) and return a
matplotlib Figure (no pyplot); ``--figure``/``--faithfulness-figure`` write them and the report
embeds them. The graph: layers left to right (the embeddings at the left, the logits at the
right), each layer's query heads as a column of dots, its MLP as a square under them; in a GQA
layer the query heads of one K/V group are joined by a shaded box labelled ``gG``, where the
group's k and v edges land. Edges of the circuit (the top n) are lines from sender to receiver,
width by |score|, colour by sign, style by input (q solid, k dashed, v dotted, else solid grey
for MLPs and logits).
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from headlab.report.figures import COLOURS, GRID, INK, legend_outside, style_axes
from headlab.results.circuit_edges import FaithfulnessCurve
from headlab.results.circuit_run import CircuitRun

POSITIVE, NEGATIVE = COLOURS[0], COLOURS[1]
STYLES = {"q": "-", "k": "--", "v": ":"}
GROUP_SHIFT = 0.17  # a K/V group's node sits left of its query heads, inside its box


def _positions(run: CircuitRun) -> dict[str, tuple[float, float]]:
    """Where each node sits: x the layer (embed -1, logits L), y the head (MLP below them)."""
    layers = len(run.heads_per_layer)
    tallest = max(run.heads_per_layer)
    where: dict[str, tuple[float, float]] = {"embed": (-1.0, (tallest - 1) / 2)}
    for layer, heads in enumerate(run.heads_per_layer):
        group = heads // run.kv_heads_per_layer[layer]
        for h in range(heads):
            where[f"{layer}.{h}"] = (float(layer), float(h))
        for g in range(run.kv_heads_per_layer[layer]):
            where[f"{layer}.g{g}"] = (layer - GROUP_SHIFT, g * group + (group - 1) / 2)
        where[f"mlp.{layer}"] = (float(layer), -1.2)
    where["logits"] = (float(layers), (tallest - 1) / 2)
    return where


def _split(edge: str) -> tuple[str, str, str]:
    sender, rest = edge.split("->", 1)
    receiver, _, tail = rest.partition("<")
    return sender, receiver, tail.rstrip(">")


def circuit_graph_figure(run: CircuitRun) -> Figure:
    """The top-``run.top`` edges of ``run`` on the model's graph (module docstring)."""
    layers = len(run.heads_per_layer)
    tallest = max(run.heads_per_layer)
    width = min(16.0, 3.0 + 0.55 * (layers + 2))
    height = min(12.0, 2.4 + 0.32 * (tallest + 2))
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    where = _positions(run)
    for layer, heads in enumerate(run.heads_per_layer):
        kv = run.kv_heads_per_layer[layer]
        if kv < heads:  # GQA: a box per K/V group, where its k and v edges land
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
                    ax.text(
                        layer - 0.26,
                        g * size + size - 0.55,
                        f"g{g}",
                        fontsize=6,
                        color="#6b7a8f",
                        va="bottom",
                    )
        xs = [layer] * heads  # heads off the circuit: faint, so an edge over one is not read
        ax.scatter(xs, range(heads), s=8, color="#d3d9e0", zorder=1)  # as ending there
        ax.scatter([layer], [-1.2], s=14, marker="s", color="#d3d9e0", zorder=1)
    for name in ("embed", "logits"):
        x, y = where[name]
        ax.scatter([x], [y], s=40, marker="D", color=INK, zorder=2)
        ax.text(x, y + 0.6, name, ha="center", fontsize=8, color=INK)
    top = run.top_edges()
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
    ends = {node for edge, _ in top for node in _split(edge)[:2] if node in where}
    for node in ends - {"embed", "logits"}:  # the circuit's nodes, dark over the faint ones
        x, y = where[node]
        ax.scatter(
            [x],
            [y],
            s=22,
            color=INK,
            zorder=4,
            marker="s" if node.startswith("mlp") or ".g" in node else "o",
        )
    named = []
    for edge, _ in top[:5]:  # name the ends of the strongest edges, each once
        named += [n for n in _split(edge)[:2] if n not in named and n not in ("embed", "logits")]
    for node in named:
        if node in where:
            x, y = where[node]
            ax.text(
                x + 0.12,
                y + 0.2,
                node,
                fontsize=9,
                color=INK,
                zorder=5,
                bbox={
                    "boxstyle": "round,pad=0.15",
                    "facecolor": "white",
                    "edgecolor": "none",
                    "alpha": 0.8,
                },
            )
    step = max(1, layers // 15)
    ax.set_xticks(
        [-1, *range(0, layers, step), layers],
        ["emb", *(str(i) for i in range(0, layers, step)), "out"],
    )
    ax.set_yticks(
        [-1.2, *range(0, tallest, max(1, tallest // 12))],
        ["mlp", *(str(h) for h in range(0, tallest, max(1, tallest // 12)))],
    )
    ax.set_xlabel("layer", color=INK)
    ax.set_ylabel("query head", color=INK)
    style_axes(ax)
    ax.grid(False)
    ax.set_xlim(-1.6, layers + 0.6)
    ax.set_ylim(-2.0, tallest + 0.4)
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

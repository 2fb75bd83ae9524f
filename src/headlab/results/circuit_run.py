"""The result of ``headlab circuits``: one task, one method, the model's own performance on the
task, every scored edge, the top ``top`` of them, and the faithfulness curve when asked.

``CircuitRun`` (KIND "circuits") holds the parts' own result types: ``TaskPerformance``
(results/circuit_tasks.py), ``EdgeScores`` and ``FaithfulnessCurve`` (results/circuit_edges.py),
and the graph's layer shapes (query and K/V heads per layer) that the figure draws. Plain data:
``to_dict`` and a validating ``from_dict``; no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from headlab.results.circuit_edges import EdgeScores, FaithfulnessCurve, method_name
from headlab.results.circuit_tasks import TaskPerformance
from headlab.results.schema import Fields, is_int, problem

RUN_METHODS = (
    "composition",
    "path-patching",
    "eap",
    "eap-ig",
    "eap-ig-activations",
    "eap-ig-senders",
)
# The graph's node names (circuits/graph.py): a head "layer.head", a K/V group "layer.gG", an MLP
# "mlp.layer"; the embeddings and the logits name no layer.
_HEAD = re.compile(r"(\d+)\.(\d+)")
_GROUP = re.compile(r"(\d+)\.g(\d+)")
_MLP = re.compile(r"mlp\.(\d+)")
_CROSS = re.compile(r"(\d+)\.x(\d+)")


@dataclass(frozen=True)
class CircuitRun:
    """``model`` on ``task`` by ``method`` (one of ``RUN_METHODS``; ``steps``: EAP-IG's m, else
    None): ``performance`` first, then ``scores`` of every edge the method scores, the circuit
    of the ``top`` largest |scores|, ``heads_per_layer`` and ``kv_heads_per_layer`` of the
    model, ``faithfulness`` (None when not measured), and for "composition" the relative
    ``rotary_offsets`` its Q and K scores were taken at (None: without rotary; a file without
    the field is read as None) and its ``baseline``: the mean score of random matrices of the
    model's shapes per input mode ("q", "k", "v", "k_group", "v_group"). ``performance`` is None
    for "composition" without a faithfulness curve: it reads the weights, the model does not
    run. ``cross_heads_per_layer``: an encoder-decoder's graph (its blocks in run order, the
    encoder's first): each block's cross-attention heads, 0 in an encoder block; None for a
    model of one stream (and in files written before it)."""

    KIND = "circuits"

    model: str
    task: str
    method: str
    steps: int | None
    top: int
    performance: TaskPerformance | None
    heads_per_layer: list[int]
    kv_heads_per_layer: list[int]
    scores: EdgeScores
    faithfulness: FaithfulnessCurve | None = None
    rotary_offsets: list[int] | None = None
    baseline: dict[str, float] | None = None
    cross_heads_per_layer: list[int] | None = None

    def top_edges(self) -> list[tuple[str, float]]:
        """The circuit: the ``top`` edges of largest |score|, largest first."""
        return self.scores.top(self.top)

    def __repr__(self) -> str:
        """One line, however many edges: what ran, and the strongest edge."""
        top = self.top_edges()
        best = f"; strongest {top[0][0]} {top[0][1]:+.3g}" if top else ""
        curve = "" if self.faithfulness is None else f"; CPR {self.faithfulness.cpr:.3f}"
        return (
            f"CircuitRun({self.model!r}, {self.task}, {self.method}: "
            f"{len(self.scores.edges)} edges, circuit of the top {self.top}{best}{curve})"
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "task": self.task,
            "method": self.method,
            "steps": self.steps,
            "top": self.top,
            "performance": None if self.performance is None else self.performance.to_dict(),
            "heads_per_layer": list(self.heads_per_layer),
            "kv_heads_per_layer": list(self.kv_heads_per_layer),
            "scores": self.scores.to_dict(),
            "faithfulness": None if self.faithfulness is None else self.faithfulness.to_dict(),
            "rotary_offsets": None if self.rotary_offsets is None else list(self.rotary_offsets),
            "baseline": None if self.baseline is None else dict(self.baseline),
            "cross_heads_per_layer": None
            if self.cross_heads_per_layer is None
            else list(self.cross_heads_per_layer),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = KIND) -> CircuitRun:
        fields = Fields(data, where)
        method = method_name(fields.str("method"))
        if method not in RUN_METHODS:
            raise problem(fields.at("method"), f"one of {', '.join(RUN_METHODS)}", method)
        steps = fields.data.get("steps")
        if steps is not None and (not is_int(steps) or steps < 1):
            raise problem(fields.at("steps"), "an integer >= 1 or null", steps)
        heads = _counts(fields, "heads_per_layer")
        kv_heads = _counts(fields, "kv_heads_per_layer")
        if len(kv_heads) != len(heads):
            raise problem(fields.at("kv_heads_per_layer"), f"{len(heads)} counts", kv_heads)
        scores = EdgeScores.from_dict(fields.object("scores").data, fields.at("scores"))
        # path patching of chosen edges (--edges) names only some nodes: counts bound them
        _check_shapes(fields, heads, kv_heads, scores.edges, some=method == "path-patching")
        top = fields.int("top", 1, max(1, len(scores.edges)))
        curve = fields.data.get("faithfulness")
        offsets = fields.data.get("rotary_offsets")
        if offsets is not None:
            offsets = fields.list("rotary_offsets", nonempty=True)
            for i, v in enumerate(offsets):
                if not is_int(v) or v < 0:
                    raise problem(f"{fields.at('rotary_offsets')}[{i}]", "an integer >= 0", v)
            if method != "composition":
                raise problem(fields.at("rotary_offsets"), "null for method " + method, offsets)
        return cls(
            model=fields.name("model"),
            task=fields.name("task"),
            method=method,
            steps=steps,
            top=top,
            performance=_performance(fields, method),
            heads_per_layer=heads,
            kv_heads_per_layer=kv_heads,
            scores=scores,
            faithfulness=None
            if curve is None
            else FaithfulnessCurve.from_dict(
                fields.object("faithfulness").data, fields.at("faithfulness")
            ),
            rotary_offsets=offsets,
            baseline=_baseline(fields, method),
            cross_heads_per_layer=_cross_heads(fields, len(heads), scores.edges),
        )


def _named_nodes(edges: list[str]) -> tuple[dict[int, int], dict[int, int], set[int]]:
    """From the edges' node names: per layer, the highest head and K/V group named, plus one
    (the count they imply), and every layer named (a head's, a group's or an MLP's)."""
    heads: dict[int, int] = {}
    groups: dict[int, int] = {}
    layers: set[int] = set()
    for edge in edges:
        sender, _, rest = edge.partition("->")
        for node in (sender, rest.partition("<")[0]):
            for pattern, counts in ((_HEAD, heads), (_GROUP, groups), (_MLP, None)):
                found = pattern.fullmatch(node)
                if found is None:
                    continue
                layer = int(found.group(1))
                layers.add(layer)
                if counts is not None:
                    counts[layer] = max(counts.get(layer, 0), int(found.group(2)) + 1)
    return heads, groups, layers


def _check_shapes(
    fields: Fields, heads: list[int], kv_heads: list[int], edges: list[str], some: bool = False
) -> None:
    """The layer shapes against what the file holds: as many layers as the edges name, each
    layer's head count the heads its edges name (every head of the graph has an edge), its K/V
    count dividing it and, where its groups are named (GQA), their count. ``some``: the edges
    may be a chosen few (path patching's --edges): the shapes need only hold what they name."""
    named_heads, named_groups, layers = _named_nodes(edges)
    if some:
        if layers and max(layers) >= len(heads):
            raise problem(
                fields.at("heads_per_layer"),
                f"more than {max(layers)} layers (those its edges name)",
                heads,
            )
        named_heads = {
            layer: max(named_heads.get(layer, 0), count) for layer, count in enumerate(heads)
        }
        named_groups = {
            layer: kv_heads[layer]
            for layer, count in named_groups.items()
            if count <= kv_heads[layer]
        } | {layer: count for layer, count in named_groups.items() if count > kv_heads[layer]}
        layers = set(range(len(heads)))
    if len(heads) != len(layers) or (layers and max(layers) != len(layers) - 1):
        raise problem(
            fields.at("heads_per_layer"), f"{len(layers)} layers (those its edges name)", heads
        )
    for layer, (count, kv) in enumerate(zip(heads, kv_heads, strict=True)):
        if count != named_heads.get(layer, 0):
            raise problem(
                f"{fields.at('heads_per_layer')}[{layer}]",
                f"{named_heads.get(layer, 0)} (the heads its edges name in layer {layer})",
                count,
            )
        at = f"{fields.at('kv_heads_per_layer')}[{layer}]"
        if layer in named_groups and kv != named_groups[layer]:
            raise problem(
                at, f"{named_groups[layer]} (the K/V groups its edges name in layer {layer})", kv
            )
        if count % kv:
            raise problem(at, f"a count dividing {count} (the layer's heads)", kv)


def _counts(fields: Fields, key: str) -> list[int]:
    values = fields.list(key, nonempty=True)
    for i, v in enumerate(values):
        if not is_int(v) or v < 1:
            raise problem(f"{fields.at(key)}[{i}]", "an integer >= 1", v)
    return values


__all__ = ["RUN_METHODS", "CircuitRun"]


def _performance(fields: Fields, method: str) -> TaskPerformance | None:
    """The model's performance; null only for "composition" (it reads the weights only)."""
    if fields.data.get("performance") is None and method == "composition":
        return None
    return TaskPerformance.from_dict(fields.object("performance").data, fields.at("performance"))


def _cross_heads(fields: Fields, layers: int, edges: list[str]) -> list[int] | None:
    """Each block's cross-attention heads (a file without the field: None), as many as the
    blocks, each at least the heads its edges name there (``L.xH``)."""
    if fields.data.get("cross_heads_per_layer") is None:
        return None
    key = "cross_heads_per_layer"
    values = fields.list(key, nonempty=True)
    if len(values) != layers:
        raise problem(fields.at(key), f"{layers} counts (one per block)", values)
    for i, v in enumerate(values):
        if not is_int(v) or v < 0:
            raise problem(f"{fields.at(key)}[{i}]", "an integer >= 0", v)
    named: dict[int, int] = {}  # block -> the cross heads its edges name
    for edge in edges:
        sender, _, rest = edge.partition("->")
        for found in map(_CROSS.fullmatch, (sender, rest.partition("<")[0])):
            if found:
                block = int(found.group(1))
                named[block] = max(named.get(block, 0), int(found.group(2)) + 1)
    for block, count in named.items():
        if block >= layers or values[block] < count:
            at = f"{fields.at(key)}[{min(block, layers - 1)}]"
            raise problem(at, f"at least {count} (the cross heads its edges name)", values)
    return values


def _baseline(fields: Fields, method: str) -> dict[str, float] | None:
    """Composition's random baseline per input mode (a file without the field: None)."""
    if fields.data.get("baseline") is None:
        return None
    if method != "composition":
        raise problem(fields.at("baseline"), "null for method " + method, fields.data["baseline"])
    found = fields.object("baseline")
    return {str(mode): found.number(mode, 0.0, 1.0) for mode in found.data}

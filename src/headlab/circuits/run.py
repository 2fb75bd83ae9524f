"""One circuits run, as ``headlab circuits`` asks for it: a task's pairs, the model's own
performance on them, every edge scored by one method, the top-n circuit, and its faithfulness
curve on request. The command only parses and prints; the work is here, in three steps so that
every input is checked before the long part starts:

    CircuitRequest(...)          checks the options (no model)
    prepare(model, request)      builds the pairs and the graph, checks the pairs against the
                                 tokenizer and --top against the edges (no forward yet)
    run_circuits(model, prepared)   performance, scores, curve -> ``CircuitRun``

Methods: "composition" (Elhage et al.'s weight-based scores, ``circuits/composition.py``, of
every head -> later head edge: q into the head, k and v into its K/V group in a GQA layer),
"path-patching" (exact, ``circuits/patching.py``), "eap" and the "eap-ig" variants
(``circuits/attribution.py``); and of nodes rather than edges (``NODE_METHODS``, node_run.py):
"nodes", "nodes-ig" (``circuits/node_attribution.py``) and "head-patching"
(``circuits/head_patching.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from headlab.attention.one_thread import one_torch_thread
from headlab.circuits.tasks import TaskPairs, TaskRequest
from headlab.limits import check_int
from headlab.results.circuit_edges import EdgeScores
from headlab.results.circuit_run import RUN_METHODS, CircuitRun
from headlab.results.node_scores import NODE_METHODS
from headlab.results.patching_estimate import PatchingEstimate, duration

Step = Callable[[int, int], None]
MAX_OFFSET = 1 << 20  # the model's own positions bound it after the load (prepare)


@dataclass(frozen=True)
class CircuitRequest:
    """``task`` (its pairs), ``method`` (one of ``RUN_METHODS``), the circuit's ``top`` edges,
    EAP-IG's ``steps`` m, whether to measure the ``faithfulness`` curve (against ``seeds``
    random circuits per size), for "composition" the ``rotary_offsets`` of rotary-aware Q-
    and K-composition (None: without rotary), and for "path-patching" the ``edges`` to patch
    (None: every edge, which ``patching_estimate`` prices first); for the node methods
    (``NODE_METHODS``) whether to keep each score ``by_position``. ValueError naming the option
    for a bad value."""

    task: TaskRequest
    method: str = "eap"
    top: int = 20
    steps: int = 5
    faithfulness: bool = False
    seeds: int = 3
    rotary_offsets: tuple[int, ...] | None = None
    edges: tuple[str, ...] | None = None
    by_position: bool = False

    def __post_init__(self) -> None:
        if self.method not in RUN_METHODS + NODE_METHODS:
            raise ValueError(
                f"method must be one of {', '.join(RUN_METHODS + NODE_METHODS)}, "
                f"got {self.method!r}"
            )
        if self.method in NODE_METHODS and self.faithfulness:
            raise ValueError(
                f"faithfulness is a curve of circuits of edges: not with method "
                f"{self.method} (it scores nodes)"
            )
        if self.by_position and self.method not in NODE_METHODS:
            raise ValueError(
                f"by_position applies to methods {', '.join(NODE_METHODS)}, got "
                f"method {self.method}"
            )
        check_int("top", self.top, low=1)
        check_int("steps", self.steps, low=1, high=10_000)
        check_int("seeds", self.seeds, low=1, high=100)
        if self.rotary_offsets is not None:
            offsets = self.rotary_offsets
            if self.method != "composition":
                raise ValueError(
                    f"rotary_offsets applies to method composition only, got method {self.method}"
                )
            if not offsets:
                raise ValueError("rotary_offsets must name at least one offset, got none")
            for offset in offsets:
                check_int("rotary_offsets", offset, low=0, high=MAX_OFFSET)
            if len(set(offsets)) != len(offsets):
                raise ValueError(f"rotary_offsets must be distinct, got {list(offsets)}")
        if self.edges is not None:
            if self.method != "path-patching":
                raise ValueError(
                    f"edges applies to method path-patching only (the others score "
                    f"every edge at once), got method {self.method}"
                )
            if not self.edges or len(set(self.edges)) != len(self.edges):
                raise ValueError(f"edges must name distinct edges, got {list(self.edges)[:5]}")
        if needs_equal_lengths(self.method) and not self.task.equal_lengths:
            raise ValueError(f"task.equal_lengths must be True for method {self.method}")
        # composition reads the weights: equal-length pairs (the task's default) serve it too

    @property
    def needed_by(self) -> str:
        """The task in words, as a refusal names what needs the model's logits."""
        task = self.task.task
        return "the pairs of your file" if task == "pairs" else f"the {task} task"


def needs_equal_lengths(method: str) -> bool:
    """Whether ``method`` patches or interpolates clean against corrupted position by position
    (every method but the weights' composition)."""
    return method != "composition"


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` checked: the pairs, the graph and the names of the edges to score (of
    the nodes, for ``NODE_METHODS``)."""

    request: CircuitRequest
    pairs: TaskPairs
    graph: object
    edges: list[str]


def prepare(model, request: CircuitRequest) -> Prepared:
    """The pairs and the graph of ``model``; ValueError for a model without next-token logits
    (an encoder: ``require_next_token_logits``), pairs the tokenizer cannot hold
    (tasks.py, tasks_pairs.py), answer tokens outside the model's vocabulary, an edge of
    ``request.edges`` the graph does not have, and ``top`` beyond the number of edges the
    method scores."""
    from headlab.circuits.blocks import graph_of
    from headlab.circuits.discovery import check_size
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import build_pairs
    from headlab.models.interface import require_next_token_logits

    require_next_token_logits(model, request.needed_by)
    pairs = build_pairs(request.task, model)
    task_metric(pairs).check_vocab(model.output_width)
    if request.rotary_offsets is not None:
        from headlab.circuits.rotary_offsets import rotations

        for layer in model.attention_layers():
            rotations(model, request.rotary_offsets, layer.head_dim)
            break
    graph = graph_of(model)
    if request.method in NODE_METHODS:  # the heads, K/V groups and MLPs (node_sites.py)
        from headlab.circuits.node_sites import units

        nodes = [node.name for node in units(graph)]
        if request.top > len(nodes):
            raise ValueError(
                f"top must be at most {len(nodes)} (the nodes {request.method} "
                f"scores in {model.name}), got {request.top}"
            )
        return Prepared(request, pairs, graph, nodes)
    edges = [e.name for e in graph.edges if _scored(graph, e, request.method)]
    if request.edges is not None:
        try:
            edges = [graph.edge(name).name for name in request.edges]
        except ValueError as error:
            raise ValueError(f"edges must be edges of {model.name}: {error}") from None
    try:
        check_size(request.top, len(edges))
    except ValueError:
        raise ValueError(
            f"top must be at most {len(edges)} (the edges {request.method} scores in "
            f"{model.name}), got {request.top}"
        ) from None
    return Prepared(request, pairs, graph, edges)


#: Path patching of every edge is refused above this estimate unless the edges are chosen.
PATCHING_LIMIT_S = 30 * 60


def patching_estimate(model, prepared: Prepared) -> PatchingEstimate:
    """Time one forward of the clean pairs (the faster of two) and count the forwards that
    patching ``prepared.edges`` takes (see ``PatchingEstimate``)."""
    import time

    from headlab.circuits.task_performance import forward_logits

    timings = []
    for _ in range(2):
        start = time.perf_counter()
        forward_logits(model, prepared.pairs.clean)
        timings.append(time.perf_counter() - start)
    layers = len(prepared.graph.layers)
    forwards = 0.0
    for name in prepared.edges:
        receiver = prepared.graph.node(prepared.graph.edge(name).receiver)
        forwards += max(1, layers - receiver.layer) / layers  # the logits: the last layer's share
    return PatchingEstimate(len(prepared.edges), forwards, min(timings))


def check_patching(estimate: PatchingEstimate, request: CircuitRequest) -> None:
    """ValueError (naming ``edges``) when patching every edge would take longer than
    ``PATCHING_LIMIT_S`` and no edges were chosen; chosen edges are patched whatever it takes."""
    if request.edges is None and estimate.seconds > PATCHING_LIMIT_S:
        raise ValueError(
            f"edges must be chosen past {duration(PATCHING_LIMIT_S)}: {estimate.says()}; "
            "pass --edges (names, or an earlier circuits results file: its top edges), e.g. "
            "after --method eap"
        )


def _scored(graph, edge, method: str) -> bool:
    if method != "composition":
        return True
    return graph.node(edge.sender).kind == "head" and graph.node(edge.receiver).kind in (
        "head",
        "group",
    )


def run_circuits(
    model,
    prepared: Prepared,
    on_step: Step | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> CircuitRun:
    """The run of the module docstring. ``on_stage(name)`` when a stage starts ("performance",
    "scores", "faithfulness"), ``on_step(done, total)`` within it. "composition" reads the
    weights only: the model runs on the task (its performance) only for the faithfulness
    curve."""
    from headlab.circuits.task_performance import task_metric, task_performance

    request, pairs, graph = prepared.request, prepared.pairs, prepared.graph
    performance, baseline = None, None
    if request.method != "composition" or request.faithfulness:  # composition reads weights
        with _stage(on_stage, "performance"):
            performance = task_performance(model, pairs)
    metric = task_metric(pairs)
    patcher = None
    with _stage(on_stage, "scores"):
        if request.method == "composition":
            scores, baseline = composition_edges(
                model, graph, prepared.edges, on_step, request.rotary_offsets
            )
        else:
            from headlab.circuits.patching import Patcher

            patcher = Patcher(model, pairs.clean, pairs.corrupted, metric)
            scores = _scores(model, pairs, metric, patcher, request, on_step, prepared.edges)
    curve = None
    if request.faithfulness:
        from headlab.circuits.circuit_patching import CircuitPatcher
        from headlab.circuits.faithfulness import faithfulness_curve
        from headlab.circuits.patching import Patcher

        with _stage(on_stage, "faithfulness"):
            patcher = patcher or Patcher(model, pairs.clean, pairs.corrupted, metric)
            curve = faithfulness_curve(
                CircuitPatcher(patcher),
                _every_edge(scores, graph),
                seeds=request.seeds,
                progress=on_step,
            )
    layers = [graph_layer for graph_layer in graph.layers]
    return CircuitRun(
        model=model.name,
        task=pairs.task,
        method=request.method,
        steps=request.steps if request.method.startswith("eap-ig") else None,
        top=request.top,
        performance=performance,
        heads_per_layer=[s.num_heads for s in layers],
        kv_heads_per_layer=[s.num_kv_heads for s in layers],
        scores=scores,
        faithfulness=curve,
        rotary_offsets=None if request.rotary_offsets is None else list(request.rotary_offsets),
        baseline=baseline,
    )


@contextlib.contextmanager
def _stage(on_stage: Callable[[str], None] | None, name: str) -> Iterator[None]:
    """One stage of a run: said to ``on_stage``, and run on one torch thread while another
    process competes for the cores (``one_torch_thread(when_busy=True)``, decided per stage).
    The circuits' tensors are small (a few pairs, one head's matrices), so each op is short and
    torch's threads wait in OpenMP barriers for a descheduled thread: measured on SmolLM2 in
    ``benchmarks/bench_circuits_threads.py`` (docs/benchmarks.md)."""
    if on_stage is not None:
        on_stage(name)
    with one_torch_thread(when_busy=True):
        yield


def _scores(
    model, pairs, metric, patcher, request: CircuitRequest, on_step, prepared_edges: list[str]
) -> EdgeScores:
    if request.method == "path-patching":
        names = list(prepared_edges)
        values = patcher.effects(names, progress=on_step)
        return EdgeScores(
            "path-patching",
            metric.kind,
            names,
            values.tolist(),
            patcher.clean_value,
            patcher.corrupted_value,
        )
    from headlab.circuits.attribution import edge_attribution

    return edge_attribution(
        model,
        pairs.clean,
        pairs.corrupted,
        metric,
        method=request.method,
        steps=request.steps,
        patcher=patcher,
        progress=on_step,
    )


def _every_edge(scores: EdgeScores, graph) -> EdgeScores:
    """``scores`` over every edge of the graph (edges it did not score at 0), as the curve's
    circuits are drawn from all of them."""
    if len(scores.edges) == len(graph.edges):
        return scores
    have = dict(zip(scores.edges, scores.scores, strict=True))
    names = [e.name for e in graph.edges]
    return EdgeScores(
        scores.method,
        scores.metric,
        names,
        [have.get(n, 0.0) for n in names],
        scores.clean_metric,
        scores.corrupted_metric,
    )


def composition_edges(
    model, graph, edges: list[str], on_step=None, offsets=None
) -> tuple[EdgeScores, dict[str, float]]:
    """Weight-based composition of ``edges`` (head -> later head or K/V group) as EdgeScores,
    with the mean score of random matrices of the same shapes for each input the edges read
    ("q", "k", "v", or "k_group", "v_group" into a K/V group): q into a head is its
    Q-composition, k and v into a head (no GQA) its K-, V-composition, into a K/V group the
    group's; rotary-aware at ``offsets`` (None: without rotary). An edge a layer cannot score
    (QK-norm leaves out Q and K) scores 0. The model does not run: its metric fields are 0."""
    from headlab.circuits.composition import composition_scores

    found = composition_scores(
        model, samples=16, on_layer=on_step, offsets=None if offsets is None else list(offsets)
    )
    values, modes = [], {}
    for name in edges:
        edge = graph.edge(name)
        grouped = graph.node(edge.receiver).kind == "group"
        mode = f"{edge.input}_group" if grouped else edge.input
        value = found.score(mode, edge.sender, edge.receiver)
        values.append(0.0 if value is None or value != value else float(value))
        if mode not in modes and found.baselines:
            modes[mode] = found.baseline_for(mode)
    return EdgeScores("composition", "weights", list(edges), values, 0.0, 0.0), modes


__all__ = [
    "CircuitRequest",
    "PatchingEstimate",
    "Prepared",
    "check_patching",
    "needs_equal_lengths",
    "patching_estimate",
    "prepare",
    "run_circuits",
]

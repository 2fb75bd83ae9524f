"""One circuits run of an encoder-decoder, as ``headlab circuits --source-text`` (or ``--audio``)
asks for it: clean and corrupted sources with one target each, the metric the decoder's
next-token log-probability of its target (teacher-forced: every target token given the ones
before it and the source), the model's own performance on it, and every edge of the two
streams' graph (stream_graph.py) scored by exact path patching (stream_patching.py) or EAP
(stream_attribution.py). The corruption is of the source alone, so every edge that matters
carries the source's information: through the encoder and the cross-attention's keys and values.

    StreamCircuitRequest(...)                  checks the options (no model)
    stream_inputs(model, pairs, corrupted)     the clean and corrupted batches and the metric
    run_stream_circuits(model, inputs, request)   -> ``CircuitRun`` (the same results file as a
                                               decoder's circuits)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from headlab.circuits.metrics import Metric, next_token_logprob
from headlab.limits import check_int
from headlab.results.circuit_edges import EdgeScores
from headlab.results.circuit_run import CircuitRun
from headlab.results.circuit_tasks import TaskPerformance

#: The methods that score the edges of two streams.
STREAM_METHODS = ("eap", "path-patching")
#: The task's name in the results: a source and the target it is read with.
TASK = "source-target"
#: below this share of target tokens predicted top-1, the model is said not to do the task
DOES_TASK = 0.5


@dataclass(frozen=True)
class StreamCircuitRequest:
    """``method`` (``STREAM_METHODS``), the circuit's ``top`` edges and, for path patching, the
    ``edges`` to patch (None: every edge). ValueError naming the option for a bad value."""

    method: str = "eap"
    top: int = 20
    edges: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.method not in STREAM_METHODS:
            raise ValueError(
                f"method must be one of {', '.join(STREAM_METHODS)} for an image model or an "
                f"encoder-decoder, got {self.method!r}"
            )
        check_int("top", self.top, low=1)
        if self.edges is not None and self.method != "path-patching":
            raise ValueError(
                f"edges applies to method path-patching only, got method {self.method}"
            )


@dataclass(frozen=True)
class StreamInputs:
    """The clean and corrupted runs' inputs (``{"encoder": SourceBatch, "decoder":
    TokenBatch}``, one target for both; an image encoder: pixel values, image_inputs.py), the
    metric on the target, the task's name and, where the inputs give it, the model's accuracy
    (None: the share of target tokens it predicts top-1)."""

    clean: object
    corrupted: object
    metric: Metric
    task: str = TASK
    accuracy: float | None = None


def _stacked(model, sources: list):
    """One SourceBatch of several (each of one source)."""
    if "input_features" in sources[0].inputs:  # audio: every source is the same frames long
        features = torch.cat([s.inputs["input_features"] for s in sources])
        labels = [label for s in sources for label in s.labels]
        return dataclasses.replace(
            sources[0],
            inputs={"input_features": features},
            mask=torch.cat([s.mask for s in sources]),
            labels=labels,
        )
    rows = [s.inputs["input_ids"][0][s.mask[0]].tolist() for s in sources]
    return model.source_ids(rows)


def stream_inputs(model, pairs: Sequence, corrupted: Sequence) -> StreamInputs:
    """From ``pairs`` [(SourceBatch, TokenBatch)] (one source each, ``heads.kind_inputs``) and
    one corrupted SourceBatch per pair. ValueError (naming the option) for a corrupted source of
    another length than its clean one, or a target with nothing to predict."""
    if len(corrupted) != len(pairs):
        raise ValueError(
            f"corrupted sources: one per source, got {len(corrupted)} for {len(pairs)}"
        )
    for i, ((source, _), bad) in enumerate(zip(pairs, corrupted, strict=True)):
        if bad.mask.shape != source.mask.shape:
            raise ValueError(
                f"corrupted source {i + 1} must be as long as its source (patching swaps "
                f"position by position): {source.mask.shape[1]} positions, got "
                f"{bad.mask.shape[1]}"
            )
    rows = [t.input_ids[0][t.attention_mask[0]].tolist() for _, t in pairs]
    target = model.target_ids(rows)
    counted = target.attention_mask.clone()
    counted[:, :-1] &= target.attention_mask[:, 1:]  # a next token to predict
    counted[:, -1] = False
    if not counted.any():
        raise ValueError("every target holds only its start token: nothing to predict")
    metric = next_token_logprob(target.input_ids, counted)
    clean = {"encoder": _stacked(model, [s for s, _ in pairs]), "decoder": target}
    bad = {"encoder": _stacked(model, list(corrupted)), "decoder": target}
    return StreamInputs(clean, bad, metric)


def _performance(patcher, inputs: StreamInputs) -> TaskPerformance:
    """The metric clean and corrupted, and the inputs' accuracy or the share of counted target
    tokens that are the model's top-1 prediction on the clean input."""
    metric, accuracy = inputs.metric, inputs.accuracy
    if accuracy is None:
        with torch.no_grad():
            logits = patcher.model.unembed(patcher.clean.final)  # (batch, n_kept, vocab)
        counted = metric.weight > 0
        right = (logits.argmax(-1) == metric.answers.to(logits.device))[counted]
        accuracy = float(right.double().mean())
    return TaskPerformance(
        inputs.task,
        metric.kind,
        metric.batch,
        patcher.clean_value,
        patcher.corrupted_value,
        accuracy,
        accuracy >= DOES_TASK,
    )


def run_stream_circuits(
    model,
    inputs: StreamInputs,
    request: StreamCircuitRequest,
    on_step: Callable[[int, int], None] | None = None,
) -> CircuitRun:
    """Performance, then every edge (or ``request.edges``) scored by ``request.method``."""
    from headlab.circuits.stream_attribution import stream_attribution
    from headlab.circuits.stream_patching import StreamPatcher

    patcher = StreamPatcher(model, inputs.clean, inputs.corrupted, inputs.metric)
    names = [e.name for e in patcher.graph.edges]
    if request.edges is not None:
        try:
            names = [patcher.graph.edge(name).name for name in request.edges]
        except ValueError as error:
            raise ValueError(f"edges must be edges of {model.name}: {error}") from None
    if request.top > len(names):
        raise ValueError(
            f"top must be at most {len(names)} (the edges scored in {model.name}), "
            f"got {request.top}"
        )
    performance = _performance(patcher, inputs)
    if request.method == "eap":
        scores = stream_attribution(
            model,
            inputs.clean,
            inputs.corrupted,
            inputs.metric,
            names,
            patcher=patcher,
            progress=on_step,
        )
    else:
        values = patcher.effects(names, progress=on_step)
        scores = EdgeScores(
            "path-patching",
            inputs.metric.kind,
            names,
            values.tolist(),
            patcher.clean_value,
            patcher.corrupted_value,
        )
    heads = [block.attention.num_heads for block in patcher.blocks]
    blocks = patcher.blocks
    cross = [0 if b.cross_attention is None else b.cross_attention.num_heads for b in blocks]
    return CircuitRun(
        model=model.name,
        task=inputs.task,
        method=request.method,
        steps=None,
        top=request.top,
        performance=performance,
        heads_per_layer=heads,
        kv_heads_per_layer=list(heads),
        scores=scores,
        cross_heads_per_layer=cross if any(cross) else None,  # one stream: a decoder's layout
    )


__all__ = [
    "STREAM_METHODS",
    "StreamCircuitRequest",
    "StreamInputs",
    "run_stream_circuits",
    "stream_inputs",
]

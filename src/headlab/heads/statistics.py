"""What each head attends to, averaged over the real (non-padding) query tokens of a corpus.

Per layer x head, with w = the head's attention weights of one query q (a row over keys k):
    entropy            -sum_k w_k ln w_k  (nats; ln(n_keys) is uniform, 0 is one-hot)
    max_weight         max_k w_k
    <special>          weight on each of the model's special positions (``special_positions``):
                       the first token (where attention sinks park their weight) under the
                       model's ``first_token`` name, and any other the model names
    self, prev         weight on the query's own position and on the one before it (queries > 0)
    distance           mean attention distance sum_k w_k |q - k| (tokens)
    contribution_norm  ||head output @ W_O block^T||_2, the head's share of the layer's output;
                       left out, with a note saying why, for a model whose attention output is
                       changed before its output projection (a gate: no W_O maps one head alone)
Means are over query tokens of all texts (longer texts weigh more). Any model behind
``headlab.models.interface.HeadModel`` works; ``detectors`` adds the causal models' head kinds.
The weights are reduced chunk by chunk as they are computed (``headlab.attention.streaming_sums``),
so memory grows linearly with the text length; ``long_context`` uses the same for one long text.
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.attention.streaming_sums import CHUNK_ELEMENTS, HeadSums
from headlab.heads.model_head_sums import model_head_sums
from headlab.heads.requests import CorpusRequest, corpus_texts
from headlab.models.interface import HeadModel
from headlab.results.head_statistics import PLAIN_METRICS, HeadStatistics


def metric_names(special: list[str]) -> tuple[str, ...]:
    """The metrics of a model whose special positions are ``special`` (in table order, the
    first token's first)."""
    return (*PLAIN_METRICS[:2], *special, *PLAIN_METRICS[2:])


#: Why the kernel's sums can lack a statistic (``attention.streaming_sums``).
UNMEASURED = {
    "contribution_norm": "the family changes the attention's output (a gate) before its "
    "output projection, so no W_O maps one head's output alone",
}


def unmeasured_note(name: str, layers: list[int] | None = None) -> str:
    """The one-line note for a statistic left out; ``layers``: those whose sums lack it (None:
    not known, e.g. from merged sums)."""
    where = "" if layers is None else f" (attention layers {', '.join(map(str, layers))})"
    return f"{name} left out{where}: {UNMEASURED.get(name, 'not measured')}"


def measured(names: tuple[str, ...], held: list) -> tuple[tuple[str, ...], list[str]]:
    """(the ``names`` that every layer's sums hold, one note per name left out). ``held``: each
    layer's sums (a mapping, or the names it holds)."""
    kept, notes = [], []
    for name in names:
        missing = [i for i, layer in enumerate(held) if name not in layer]
        if missing:
            notes.append(unmeasured_note(name, missing))
        else:
            kept.append(name)
    return tuple(kept), notes


def layer_notes(model: HeadModel) -> list[str]:
    """The model's own notes on its list of layers, from its optional ``layer_notes()`` (a
    hybrid on the transformers route: which of its blocks have no heads); none otherwise."""
    notes = getattr(model, "layer_notes", None)
    return list(notes()) if callable(notes) else []


def special_names(model: HeadModel, special: dict) -> list[str]:
    """The names of ``model``'s special positions ``special``, its first token first."""
    return sorted(special, key=lambda name: name != model.first_token)


def model_metrics(model: HeadModel) -> tuple[tuple[str, ...], list[str]]:
    """(the metrics of ``model``, notes on those left out), from one forward of two tokens: its
    special positions are named the same for every batch, and a statistic its kernel cannot
    measure (``UNMEASURED``) is missing from every batch's sums."""
    batch = model.tokenize(["a"], 2)
    names = metric_names(special_names(model, model.special_positions(batch)))
    _, per_layer = model_head_sums(model, batch)
    names, notes = measured(names, [sums.sums for sums in per_layer])
    return names, [*notes, *layer_notes(model)]


def check_metric(model: HeadModel, metric: str) -> None:
    """ValueError unless ``model`` reports ``metric`` (``heads.statistics.model_metrics``: its
    special positions and one forward of two tokens), so before any statistics are computed."""
    names, notes = model_metrics(model)
    if metric not in names:
        why = next((f" ({note})" for note in notes if note.startswith(f"{metric} ")), "")
        raise ValueError(
            f"metric must be one of {', '.join(names)} for this model, got {metric!r}{why}"
        )


def model_metric_names(model: HeadModel) -> tuple[str, ...]:
    """The metrics ``head_statistics`` reports for ``model`` (``model_metrics``), before it runs."""
    return model_metrics(model)[0]


def per_head_means(layers: list[list[HeadSums]], names: tuple[str, ...]) -> dict:
    """name -> (layer, head) means over the counted queries of every call of each layer."""
    means = {}
    for name in names:
        grid = []
        for calls in layers:
            total = sum(c.sums[name] for c in calls)
            count = sum(c.n_prev if name == "prev" else c.n_queries for c in calls)
            grid.append((total / max(count, 1)).tolist())
        means[name] = grid
    return means


def head_statistics(
    model: HeadModel,
    texts: list[str] | CorpusRequest,
    *,
    batch_size: int = 16,
    max_length: int | None = None,
    detector_length: int | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
    on_batch=None,
) -> HeadStatistics:
    """Per-head attention statistics of ``model`` over ``texts``.

    One forward per batch; every layer's weights are reduced chunk by chunk as they are computed
    (``headlab.heads.model_head_sums``), never stored. detector_length: for a causal model, also
    score the previous-token, duplicate-token and induction heads on random token sequences of this
    length repeated twice (0: skip; None, the default as for ``headlab model heads``:
    ``detectors.default_length(model)``); ValueError before any batch runs unless twice the
    length fits the model; by default, texts of fewer than 2 distinct tokens leave the detectors
    out with a note. on_batch: called with the number of texts done after each batch
    (progress). Needs at least one text.
    """
    texts, max_length = corpus_texts(texts, max_length, model.max_positions)
    if not texts:
        raise ValueError("expected at least one text, got none")
    by_default = detector_length is None
    if by_default:
        from headlab.heads.detectors import default_length

        detector_length = default_length(model)
    elif detector_length and model.causal:
        from headlab.heads.detectors import check_length

        check_length(model, detector_length)  # before the corpus runs
    layers: list[list[HeadSums]] = [[] for _ in range(model.num_layers)]
    seen_ids: list[Tensor] = []
    for start in range(0, len(texts), batch_size):
        batch = model.tokenize(texts[start : start + batch_size], max_length)
        seen_ids.append(batch.input_ids[batch.attention_mask])
        _, per_layer = model_head_sums(model, batch, chunk_elements=chunk_elements)
        for calls, sums in zip(layers, per_layer, strict=True):
            calls.append(sums)
        if on_batch is not None:
            on_batch(min(start + batch_size, len(texts)))
    names = metric_names(special_names(model, model.special_positions(batch)))
    names, notes = measured(names, [calls[0].sums for calls in layers])
    notes += layer_notes(model)
    detected = {}
    vocabulary = torch.cat(seen_ids).unique()
    if by_default and vocabulary.numel() < 2 and detector_length and model.causal:
        # the default asks for nothing: texts of one token id leave the detectors out, said
        notes.append("detectors left out: the texts hold fewer than 2 distinct tokens")
        detector_length = 0
    if detector_length and model.causal:
        from headlab.heads.detectors import detect_heads

        detected = detect_heads(model, vocabulary, detector_length)
    metrics = per_head_means(layers, names)
    return HeadStatistics(
        model.name,
        len(texts),
        model.num_layers,
        max(model.heads_per_layer),
        metrics,
        detected,
        notes,
    )

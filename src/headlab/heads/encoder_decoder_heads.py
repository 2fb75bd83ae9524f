"""Per-head statistics and ablation of an encoder-decoder, each attention kind apart.

``encoder_decoder_statistics(model, pairs)``: over (source, target) batches, teacher-forced,
every layer's weights reduced chunk by chunk by the kernel (``attention.streaming_sums``, the
same sums as ``heads.statistics`` for text models), never stored. Queries counted: the source's
real positions for the encoder's self-attention, the target's for the decoder's self-attention
and the cross-attention. Per kind, per (layer, head), the mean over counted queries of:

    entropy, max_weight      as for text models
    first                    weight on the first key (the source's first token or 20 ms of
                             audio for the encoder and the cross-attention, the start token for
                             the decoder)
    last                     (text sources, encoder and cross-attention) weight on the source's
                             last real token (T5's and BART's </s>)
    self, prev, distance     only where queries and keys are one stream (the two self-attentions)
    contribution_norm        ||head output @ W_O block^T||, W_O that attention's own

``encoder_decoder_ablation(model, pairs, kind, heads)``: the target's next-token cross-entropy
with and without ``heads`` of ``kind`` (head mask 0, the head's output zeroed before that
attention's W_O: for the cross-attention, before the cross-attention's output projection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack

import torch

from headlab.attention.streaming_sums import HeadSums, StatisticsRequest, observing
from headlab.heads.cross_patterns import cross_patterns
from headlab.heads.statistics import measured, per_head_means
from headlab.models.hf.encoder_decoder import EncoderDecoderModel, SourceBatch
from headlab.models.interface import TokenBatch
from headlab.results.head_statistics import HeadStatistics
from headlab.results.stream_heads import EncoderDecoderHeads, KindAblation

Pairs = Sequence[tuple[SourceBatch, TokenBatch]]
SELF_METRICS = (
    "entropy",
    "max_weight",
    "first",
    "last",
    "self",
    "prev",
    "distance",
    "contribution_norm",
)
ACROSS = "self, prev and distance left out: queries and keys are in different streams"
LOSS = "next-token cross-entropy of the target (teacher-forced)"


def _special(kind: str, source: SourceBatch, target: TokenBatch) -> dict[str, torch.Tensor]:
    """name -> (batch,) key index of each special key of ``kind``."""
    if kind == "decoder":
        return {"first": torch.zeros(target.input_ids.shape[0], dtype=torch.long)}
    first = torch.zeros(source.mask.shape[0], dtype=torch.long)
    if "input_ids" not in source.inputs:  # audio: no token closes the source
        return {"first": first}
    return {"first": first, "last": source.mask.sum(1) - 1}


def _batch_sums(model: EncoderDecoderModel, source: SourceBatch, target: TokenBatch) -> dict:
    """kind -> one HeadSums per layer, from one teacher-forced forward."""
    collected = {kind: [[] for _ in layers] for kind, layers in model.layers.items()}
    with ExitStack() as stack, torch.no_grad():
        for kind, layers in model.layers.items():
            queries = source.mask if kind == "encoder" else target.attention_mask
            special = _special(kind, source, target)
            for i, layer in enumerate(layers):
                request = StatisticsRequest(
                    query_mask=queries, special=special, report=collected[kind][i].append
                )
                stack.enter_context(observing(layer, request))
        model.run(source, target)
    for kind, layers in collected.items():
        calls = [len(c) for c in layers]
        if any(n != 1 for n in calls):
            raise ValueError(f"expected one {kind} attention call per layer, got {calls}")
    return {kind: [c[0] for c in layers] for kind, layers in collected.items()}


def encoder_decoder_statistics(
    model: EncoderDecoderModel,
    pairs: Pairs,
    on_batch: Callable[[int], None] | None = None,
    *,
    patterns: bool = True,
) -> EncoderDecoderHeads:
    """Per-head statistics of each attention kind over ``pairs`` (see the module docstring).
    on_batch(n): after each batch, with the number of sources done. ``patterns``: also keep the
    first pair's cross-attention weights of every head (``heads.cross_patterns``, one more
    forward of that pair). ValueError without pairs."""
    if not pairs:
        raise ValueError("expected at least one source and target, got none")
    sums: dict[str, list[list[HeadSums]]] = {k: [[] for _ in v] for k, v in model.layers.items()}
    done = 0
    for source, target in pairs:
        for kind, per_layer in _batch_sums(model, source, target).items():
            for calls, one in zip(sums[kind], per_layer, strict=True):
                calls.append(one)
        done += source.mask.shape[0]
        if on_batch is not None:
            on_batch(done)
    kinds = {}
    for kind, layers in sums.items():
        if not layers:
            continue
        wanted = SELF_METRICS
        if kind == "cross":
            wanted = tuple(m for m in SELF_METRICS if m not in ("self", "prev", "distance"))
        held = layers[0][0].sums  # "last" only where the kind has a source's last token
        wanted = tuple(m for m in wanted if m != "last" or m in held)
        names, notes = measured(wanted, [calls[0].sums for calls in layers])
        if kind == "cross":
            notes.append(ACROSS)
        heads = max(layer.num_heads for layer in model.layers[kind])
        kinds[kind] = HeadStatistics(
            model.name, done, len(layers), heads, per_head_means(layers, names), {}, notes
        )
    kept = None
    if patterns and "cross" in kinds:
        kept = cross_patterns(model, *pairs[0])
    return EncoderDecoderHeads(model.name, done, kinds, kept)


def check_heads(model, kind: str, heads: Sequence[tuple[int, int]]) -> None:
    """ValueError naming the first (layer, head) that ``kind`` does not have."""
    counts = model.heads_per_layer(kind)
    if not heads:
        raise ValueError("expected at least one head to ablate, got none")
    for layer, head in heads:
        if not 0 <= layer < len(counts):
            raise ValueError(f"{kind} layer must be in [0, {len(counts)}), got {layer}")
        if not 0 <= head < counts[layer]:
            raise ValueError(f"{kind} layer {layer} has heads [0, {counts[layer]}), got {head}")


def zero_masks(model, kind: str, heads: Sequence[tuple[int, int]]) -> list:
    """One (head,) mask per layer of ``kind``: 0 at ``heads``, None for a layer without any."""
    masks: list = [None] * len(model.heads_per_layer(kind))
    for layer, head in heads:
        if masks[layer] is None:
            masks[layer] = torch.ones(model.heads_per_layer(kind)[layer])
        masks[layer][head] = 0.0
    return masks


def encoder_decoder_ablation(
    model: EncoderDecoderModel, pairs: Pairs, kind: str, heads: Sequence[tuple[int, int]]
) -> KindAblation:
    """The target's loss over ``pairs`` with and without ``heads`` of ``kind`` (see the module
    docstring): each batch weighs by its counted target tokens."""
    check_heads(model, kind, heads)
    masks = {kind: zero_masks(model, kind, heads)}
    totals, count, n = [0.0, 0.0], 0, 0
    with torch.no_grad():
        for source, target in pairs:
            tokens = int(target.attention_mask[:, 1:].sum())
            totals[0] += float(model.loss(source, target)) * tokens
            totals[1] += float(model.loss(source, target, masks)) * tokens
            count += tokens
            n += source.mask.shape[0]
    if not count:
        raise ValueError("every target holds only its start token: nothing to predict")
    return KindAblation(
        model.name, n, kind, LOSS, [tuple(h) for h in heads], totals[0] / count, totals[1] / count
    )

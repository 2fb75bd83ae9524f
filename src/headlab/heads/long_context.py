"""Every head of a model on one long text, exactly, without the (q_pos, k_pos) weights.

``long_text_statistics`` tokenizes one text (cut to ``max_tokens``, which the result states),
runs the model once with every layer's statistics reduced chunk by chunk
(``headlab.heads.model_head_sums``) and returns the statistics of ``heads.statistics`` plus each
head's heavy-hitter profile: the attention each key position receives, summed over the queries.
For a model of 30 layers x 9 heads at 8192 tokens the weights would be 30 x 9 x 8192^2 x 4
bytes = 72 GB; here one chunk of one layer is alive at a time.

In the same pass: each head's role (``heads.roles``: retrieval, copy, sink, local, mixed) from
its window error, its weight on the text's own repeats (``heads.repeats``) and the model's own
predictions there, and its attention maps along the text (``heads.attention_maps``).

``long_context_findings`` reduces a result to what the long-context literature reports: the
share of heads that are attention sinks (mean first-token weight > 0.3, Gu et al. 2025), the
mean attention distance of each layer, and the heads whose heavy-hitter profile is most
concentrated (apart from the model's special positions such as the first token).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention.streaming_sums import CHUNK_ELEMENTS, HeadSums
from headlab.heads.attention_maps import attention_maps, block_size
from headlab.heads.model_head_sums import model_head_sums
from headlab.heads.repeats import copy_sources
from headlab.heads.roles import head_roles
from headlab.heads.statistics import (
    layer_notes,
    measured,
    metric_names,
    per_head_means,
    special_names,
)
from headlab.limits import check_fits, check_int
from headlab.models.interface import HeadModel, TokenBatch
from headlab.models.output_rows import LOGIT_ROWS, next_token_scores
from headlab.results.head_roles import MIN_MATCH, SINKS, WINDOW
from headlab.results.head_statistics import HeadStatistics
from headlab.results.long_context_result import (
    HeavyHitters,
    LongContextFindings,
    LongContextStatistics,
    TextContext,
)

SINK_THRESHOLD = 0.3  # mean weight on the first token above which a head is a sink
TOP_KEY_SHARE = 0.01  # the heavy hitters: the top 1% of key positions
TOP_KEYS_KEPT = 5  # of those, the positions a results file lists per head


def heavy_hitters(received: Tensor, special: list[int]) -> tuple[Tensor, Tensor]:
    """(share, top) of ``received`` (layer, head, k_pos), the attention each key receives, with
    the key positions ``special`` left out: share (layer, head), the part of the attention to
    the other keys that their top 1% receive; top (layer, head, n_top) those key positions,
    most attended first."""
    received = received.clone()
    received[..., special] = 0.0
    n_top = max(1, math.ceil(TOP_KEY_SHARE * (received.shape[-1] - len(special))))
    values, top = received.topk(n_top, dim=-1)
    return values.sum(-1) / received.sum(-1).clamp_min(1e-30), top


def estimated_bytes(model: HeadModel, n_tokens: int, chunk_elements: int) -> int:
    """Peak memory of ``long_text_statistics`` beyond the weights: activations of one layer
    (about 12 rows of embed_dim, as the MLP widens them), a language model's logits of
    ``LOGIT_ROWS`` positions (and their float64 copy), and a few copies of one chunk of
    weights."""
    layer = model.attention_layers()[0]
    rows = 12 * layer.embed_dim * n_tokens
    logits = 3 * min(n_tokens, LOGIT_ROWS) * model.output_width
    return 4 * (rows + logits + 4 * chunk_elements)


@dataclass(frozen=True)
class TextPass:
    """One streaming pass over one text (``text_pass``): the batch, the text's length before the
    cut, the copy positions' sources (pos,), each layer's sums, whether the
    window errors were measured, and at each copy position whether the model's own top-1
    prediction is the copied token (None for a model that predicts no tokens)."""

    batch: TokenBatch
    text_tokens: int
    sources: Tensor
    per_layer: list[HeadSums]
    windowed: bool
    correct: Tensor | None

    def retrieval_hits(self) -> list[list[int]] | None:
        """(layer, head) copy positions where the head's largest weight is on the source and
        the model predicted the copied token (Wu et al.'s count)."""
        if self.correct is None:
            return None
        return [(s.copy_hits & self.correct[None, :]).sum(-1).tolist() for s in self.per_layer]


def cut_text(model: HeadModel, text: str, limit: int) -> tuple[TokenBatch, TextContext]:
    """``text`` tokenized and cut to ``limit`` tokens: (the one-text batch, its context: the
    tokens kept and the text's length before the cut). What every long-text command measures
    its "cut from" with. Only the start that the cut needs is tokenised (``prefix_until``): a
    50 MB text costs what its first ``limit`` tokens cost, and ``text_tokens`` is then the
    length of that start, more than ``limit`` (a lower bound of the whole text's)."""
    from headlab.results.input_files import prefix_until

    text = prefix_until(text, lambda start: model.count_tokens(start) > limit)
    text_tokens = model.count_tokens(text)
    batch = model.tokenize([text], limit)
    n_tokens = len(batch.tokens[0])
    return batch, TextContext(n_tokens, text_tokens, text_tokens > n_tokens)


def text_pass(
    model: HeadModel,
    text: str,
    *,
    max_tokens: int | None,
    window: tuple[int, int] | None,
    min_match: int,
    chunk_elements: int = CHUNK_ELEMENTS,
    on_layer: Callable[[int], None] | None = None,
    block: bool = False,
    strict_window: bool = False,
) -> TextPass:
    """One forward of ``model`` over ``text`` (cut to ``max_tokens``, default the model's
    limit) with every statistic streamed: the statistics, window errors (``window`` = (sinks,
    size), when the text is longer than sinks + size; ``strict_window`` refuses a shorter one),
    copy positions, and with ``block`` the blocked maps. Raises ValueError for an empty text or
    max_tokens out of range, MemoryError (via ``check_fits``) when the run would not fit in this
    machine's memory."""
    limit = model.max_positions if max_tokens is None else max_tokens
    check_int("max_tokens", limit, low=2, high=model.max_positions)
    if not text.strip():
        raise ValueError("expected a text with at least 2 tokens, got an empty text")
    batch, context = cut_text(model, text, limit)
    text_tokens, n_tokens = context.text_tokens, context.n_tokens
    if n_tokens < 2:
        raise ValueError(f"expected a text with at least 2 tokens, got {n_tokens}")
    if strict_window and window is not None and n_tokens <= sum(window):
        raise ValueError(
            f"the text has {n_tokens} tokens, not more than sinks {window[0]} + window "
            f"{window[1]}: every key is in the window; use a longer text or a smaller window"
        )
    check_fits(f"statistics of {n_tokens} tokens", estimated_bytes(model, n_tokens, chunk_elements))
    ids = batch.input_ids[0]
    sources = copy_sources(ids, min_match)  # (pos,)
    windowed = window is not None and n_tokens > sum(window)
    output, per_layer = model_head_sums(
        model,
        batch,
        chunk_elements=chunk_elements,
        on_layer=on_layer,
        window=window if windowed else None,
        copy_sources=sources[None],
        block=block_size(n_tokens) if block else None,
        logits_by_rows=True,
    )
    copies = (sources >= 0).nonzero()[:, 0]  # (n_copy,) copy positions in order
    correct = None
    if model.objective_kind == "next-token":
        top1, _ = next_token_scores(output, batch.input_ids)  # (1, pos - 1)
        correct = top1[0, copies] == ids[copies + 1]  # (n_copy,)
    return TextPass(batch, text_tokens, sources, per_layer, windowed, correct)


def long_text_statistics(
    model: HeadModel,
    text: str,
    *,
    max_tokens: int | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
    on_layer: Callable[[int], None] | None = None,
    window: tuple[int, int] | None = (SINKS, WINDOW),
    strict_window: bool = False,
    min_match: int = MIN_MATCH,
) -> LongContextStatistics:
    """Every head's statistics, heavy-hitter profile, role scores and maps on ``text`` (cut to
    ``max_tokens``, default the model's limit), in one pass (``text_pass``).

    window: (sinks, window) of the window errors (None: none); a text not longer than sinks +
    window has none either (the roles say so), unless ``strict_window``, which refuses it.
    min_match: how many tokens a repeat must have run for before its next token is a copy
    position. Raises ValueError for an empty text, max_tokens or the window out of range,
    MemoryError (via ``check_fits``) when the run would not fit in this machine's memory."""
    if window is not None:
        check_int("sinks", window[0], low=0)
        check_int("window", window[1], low=1)
    run = text_pass(
        model,
        text,
        max_tokens=max_tokens,
        window=window,
        min_match=min_match,
        chunk_elements=chunk_elements,
        on_layer=on_layer,
        block=True,
        strict_window=strict_window,
    )
    per_layer = run.per_layer
    special = model.special_positions(run.batch)  # name -> (1,) key index
    names = metric_names(special_names(model, special))
    names, notes = measured(names, [sums.sums for sums in per_layer])
    notes += layer_notes(model)
    statistics = HeadStatistics(
        model.name,
        1,
        model.num_layers,
        max(model.heads_per_layer),
        per_head_means([[sums] for sums in per_layer], names),
        notes=notes,
    )
    received = torch.stack([sums.received for sums in per_layer])  # (layer, head, k_pos)
    positions = sorted({int(index[0]) for index in special.values()})
    n_tokens = len(run.batch.tokens[0])
    sinks, size = window if window is not None else (SINKS, WINDOW)
    roles = head_roles(
        sinks=sinks,
        window=size,
        first=statistics.metrics[statistics.first_token],
        window_error=[(s.sums["window_error"] / s.n_queries).tolist() for s in per_layer]
        if run.windowed
        else None,
        copy_weight=[(s.sums["copy_weight"] / max(s.n_copy, 1)).tolist() for s in per_layer],
        retrieval_hits=run.retrieval_hits(),
        copies=per_layer[0].n_copy,
        kv_heads_per_layer=model.kv_heads_per_layer,
        no_window=f"the text ({n_tokens} tokens) is not longer than {sinks} sinks + a window of "
        f"{size}: every key is in the window, no window errors or roles",
    )
    maps = attention_maps(
        torch.stack([s.blocks for s in per_layer]),
        per_layer[0].block_rows,
        received,
        block_size(n_tokens),
    )
    share, top = heavy_hitters(received, positions)
    heavy = HeavyHitters(share.tolist(), top[..., :TOP_KEYS_KEPT].tolist(), list(positions))
    findings = long_context_findings(statistics, share)
    return LongContextStatistics(
        statistics,
        received.numpy(),
        run.batch.tokens[0],
        run.text_tokens,
        positions,
        heavy,
        findings,
        roles,
        maps,
    )


def long_context_findings(
    statistics: HeadStatistics, share: Tensor, count: int = 5
) -> LongContextFindings:
    """The sink share, each layer's mean attention distance, the ``count`` most concentrated
    heads (by ``share``, (layer, head): ``heavy_hitters``)."""
    first = statistics.metrics[statistics.first_token]
    heads = sum(len(row) for row in first)
    sinks = sum(v > SINK_THRESHOLD for row in first for v in row)
    distance = [sum(row) / len(row) for row in statistics.metrics["distance"]]
    cells = [[l, h, float(share[l, h])] for l, row in enumerate(first) for h in range(len(row))]
    return LongContextFindings(
        sink_threshold=SINK_THRESHOLD,
        sink_share=sinks / heads,
        sinks=sinks,
        heads=heads,
        mean_distance_per_layer=distance,
        most_concentrated=sorted(cells, key=lambda c: -c[2])[:count],
    )

"""The one attention kernel: every path of headlab's attention is this function.

    S = scale * Q K_g^T            (batch, head, q_pos, k_pos); K/V head g = head // group
    S = cap * tanh(S / cap)        optional soft-capping of the logits (Gemma 2)
    S = S + M                      the mask (``MaskSpec``): -inf where hidden, plus any bias
    P = softmax([S | sink])[:k]    optional sink logit per head: a column with no value (gpt-oss)
    O = P V_g                      (batch, head, q_pos, d_value), then the head scale (head_mask)

Grouped K/V heads (GQA/MQA) are never repeated in memory: the query heads of one group are
stacked as rows of one product with their K/V head. A query row that sees no key gets P = 0,
O = 0 and S = 0 (where the scores are returned). A head view (``head_view`` n < head) scores
each group of head/n consecutive heads as one head, sum_i S_i / sqrt(head/n) (the scores of the
re-split projections), and every member of a group outputs that group's P times its own values:
the same weights viewed with fewer heads. A sink logit is one more score column, so a group's
sinks merge the same way.

``attend`` takes one of these paths, chosen in one place (``choose_path``):
  fused           ``F.scaled_dot_product_attention``: nothing needs the score matrix
  explicit        whole (q_pos, k_pos) tensors with autograd: per-head weights, intervention
                  sites on the scores or weights, soft-cap, sinks or views with autograd
  averaged        weights averaged over heads with their own backward (``AveragedAttention``)
  whole           weights averaged over heads without autograd, small: one block in place
  blocked         the same, large: query rows in blocks sized for the cache, per-head weights
                  never held whole
  chunked         no weights, no autograd, rows in chunks: what SDPA cannot serve (soft-cap,
                  sinks, views, windows and lazy masks)
  recomputed      the same with autograd, large: a backward that recomputes each chunk's
                  weights instead of keeping them (``chunked.RecomputedAttention``)
  banded          a KV plan's layer (causality and a ``KeyBudget``, nothing else, no weights,
                  no autograd): fused for every head, then the budgeted heads again, a block of
                  queries at a time over only the keys they keep (the sinks and the window band)
  streamed        per-head statistics streamed from each chunk (``statistics.StreamingSums``)
  streamed-whole  the statistics from the whole matrix, where it is needed anyway (weights
                  asked, a site on the scores or weights, autograd)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.attention.averaged import AveragedAttention
from headlab.attention.block import block_weights, values
from headlab.attention.chunked import RecomputedAttention, chunked
from headlab.attention.layout import shape_check, static_graph
from headlab.attention.mask_spec import MaskSpec
from headlab.attention.sdpa_paths import banded as _banded
from headlab.attention.sdpa_paths import fused as _fused
from headlab.attention.sdpa_paths import whole_mask as _whole
from headlab.attention.sites import Sites
from headlab.attention.streaming_sums import (
    CHUNK_ELEMENTS,
    HeadSums,
    StatisticsRequest,
    StreamingSums,
)

# Below MIN_BLOCKED per-head weights averaged over heads, the whole tensor is about as fast as
# the blocked loop. From MIN_RECOMPUTED per-head weights on (16 MiB in float32), autograd of
# what SDPA cannot serve (soft-cap, sinks, views; SDPA's own backward keeps no weights)
# recomputes each chunk's weights in the backward instead of holding the whole scores and
# weights (and their soft-cap and softmax intermediates) until it runs.
MIN_BLOCKED = 2**20
MIN_RECOMPUTED = CHUNK_ELEMENTS


@dataclass(frozen=True)
class Attended:
    """What one call of ``attend`` returns.

    head_out: (batch, head, q_pos, d_value), after the head scale and the head_outputs site.
    weights: per head (batch, head, q_pos, k_pos), averaged over heads (batch, q_pos, k_pos), or
        None, as ``need_weights`` asked (per head also when an intervention site needed them).
    scores: (batch, head, q_pos, k_pos) S after the mask (0 on rows that see no key), when the
        explicit path ran.
    sums: the streamed statistics, when asked.
    q, k, v: the inputs after the q, k and v sites.
    """

    head_out: Tensor
    weights: Tensor | None
    scores: Tensor | None
    sums: HeadSums | None
    q: Tensor
    k: Tensor
    v: Tensor


# ---------------------------------------- the paths (fused and banded: attention/sdpa_paths.py)
def _explicit(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MaskSpec | None,
    *,
    scale: float,
    softcap: float | None,
    sinks: Tensor | None,
    view: int | None,
    dropout_p: float,
    sites: Sites | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(head_out, weights, scores) from whole tensors, with autograd and every site; the
    scores of a row that sees no key are 0, as its weights and its output."""
    merged = _whole(mask, q, k)
    scores, weights = block_weights(
        q, k, merged, scale=scale, softcap=softcap, sinks=sinks, view=view, sites=sites
    )
    if merged is not None and merged.keep is not None:
        scores = scores.masked_fill(merged.keep == 0, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    if sites is not None:
        weights = sites("weights", weights)
    return values(weights, v, q.shape[1]), weights, scores


# ----------------------------------------------------------------------------- the path
Path = Literal[
    "fused",
    "explicit",
    "averaged",
    "whole",
    "blocked",
    "chunked",
    "recomputed",
    "banded",
    "streamed",
    "streamed-whole",
]


def choose_path(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MaskSpec | None,
    *,
    special: bool,
    dropout_p: float,
    need_weights: str | None,
    sites: Sites | None,
    statistics: StatisticsRequest | None,
) -> Path:
    """Which path one call of ``attend`` takes (the module docstring lists them); ``special``:
    soft-cap, sinks or a head view asked (SDPA and the averaged function cannot do them).

    The only place that chooses: whole matrices where something needs them (per-head weights,
    a site on the scores or weights, autograd or dropout of what SDPA cannot do), the averaged
    function or blocks for weights averaged over heads, blocks without weights where SDPA
    cannot serve the mask or the options, SDPA everywhere else."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    matrix_sites = sites is not None and sites.touches_scores()
    recorded = static_graph()
    if statistics is not None:  # the sums from the whole matrix where it is needed anyway
        whole = need_weights is not None or matrix_sites or needs_grad
        return "streamed-whole" if whole else "streamed"
    if need_weights == "heads" or matrix_sites:
        return "explicit"
    grad_mask = mask is not None and any(
        t is not None and t.requires_grad for t in (mask.attn_mask, mask.bias)
    )
    if (
        needs_grad
        and special
        and need_weights is None
        and dropout_p == 0.0
        and not grad_mask
        and not recorded
        and q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] >= MIN_RECOMPUTED
    ):
        return "recomputed"  # whole weights under autograd would hold several (q_pos, k_pos)
    if special and (needs_grad or dropout_p > 0 or need_weights is not None or recorded):
        return "explicit"
    if need_weights == "mean":
        if dropout_p > 0 or grad_mask or q.device.type != "cpu" or recorded:
            return "explicit"
        if needs_grad:
            return "averaged"
        per_head = q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]
        return "blocked" if per_head >= MIN_BLOCKED else "whole"
    if (
        not special
        and mask is not None
        and mask.budget is not None
        and replace(mask, budget=None).plain_causal
        and q.shape[2] == k.shape[2]
        and not needs_grad
        and not recorded
        and dropout_p == 0.0
    ):
        return "banded"  # a KV plan's layer: SDPA, then the budgeted heads over their band
    if special or (mask is not None and mask.large and not needs_grad and not recorded):
        return "chunked"  # SDPA cannot do these, or would need a whole mask per head
    return "fused"


# ----------------------------------------------------------------------------- the entry point
# Under torch.jit.trace (the legacy ONNX export) shapes are tensors and every Python use of one
# warns; head counts and group sizes are the module's constants, and the lengths flow as tensors
# into the ops (the recorded graph takes other lengths), so the warnings are silenced.
@dataclass(frozen=True)
class AttendOptions:
    """What one call of ``attend`` does besides plain attention (every field optional).

    scale: of the scores, default 1 / sqrt(d_head). softcap: the cap of the logits. sinks:
    (head,) sink logits. dropout_p: dropout of the weights. need_weights: None, "heads" (per
    head) or "mean" (averaged over heads). sites: interventions (q, k, v, scores, weights,
    head_outputs), a statistics request and a key budget attached to the layer. head_scale:
    (batch|1, head, 1, 1) multiplies each head's output (head_mask). head_view: view the heads
    as this many (a divisor of head). statistics: stream per-head sums into
    ``statistics.report`` (without dropout; the weights asked are returned as well).
    """

    scale: float | None = None
    softcap: float | None = None
    sinks: Tensor | None = None
    dropout_p: float = 0.0
    need_weights: str | None = None
    sites: Sites | None = None
    head_scale: Tensor | None = None
    head_view: int | None = None
    statistics: StatisticsRequest | None = None


PLAIN = AttendOptions()


@shape_check
def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: MaskSpec | None = None, options: AttendOptions = PLAIN
) -> Attended:
    """Attention of per-head queries over grouped keys and values (see the module docstring).

    q: (batch, head, q_pos, d_head); k: (batch, kv_head, k_pos, d_head); v: (batch, kv_head,
    k_pos, d_value), head a multiple of kv_head. mask: which keys each query sees (None: all).
    options: ``AttendOptions``. Raises ValueError for shapes that do not fit.
    """
    o = options
    sinks, softcap, dropout_p, need_weights = o.sinks, o.softcap, o.dropout_p, o.need_weights
    statistics = o.statistics
    heads, groups = int(q.shape[1]), int(k.shape[1])
    if groups == 0 or heads % groups:
        raise ValueError(f"query heads ({heads}) must be a multiple of K/V heads ({groups})")
    if o.head_view is not None and (o.head_view <= 0 or heads % o.head_view):
        raise ValueError(f"head_view must divide the {heads} query heads, got {o.head_view}")
    view = None if o.head_view in (None, heads) else o.head_view
    if statistics is not None and view is not None:
        raise ValueError("statistics are per head: they cannot be streamed through a view")
    scale = q.shape[-1] ** -0.5 if o.scale is None else o.scale
    sites = o.sites if o.sites else None
    if sites is not None:
        q, k, v = sites("q", q), sites("k", k), sites("v", v)
        if sites.budget is not None:  # a KV plan: its heads see sinks and a window only
            mask = replace(mask or MaskSpec(), budget=sites.budget)
    score_options = {"scale": scale, "softcap": softcap, "sinks": sinks, "view": view}
    path = choose_path(
        q,
        k,
        v,
        mask,
        special=any(x is not None for x in (softcap, sinks, view)),
        dropout_p=dropout_p,
        need_weights=need_weights,
        sites=sites,
        statistics=statistics,
    )
    sums = None if statistics is None else _streaming_sums(q, k, mask, statistics, sinks)
    weights = scores = None
    if path in ("explicit", "streamed-whole"):
        dropout = dropout_p if path == "explicit" else 0.0  # statistics are of the eval model
        head_out, weights, scores = _explicit(
            q, k, v, mask, dropout_p=dropout, sites=sites, **score_options
        )
        if sums is not None:  # the outputs before the head_outputs site, as the chunks see them
            _add_whole(sums, weights.detach(), v.detach(), mask)
        if need_weights == "mean":
            weights = weights.mean(dim=1)
    elif path == "averaged":
        head_out, weights = AveragedAttention.apply(q, k, v, _whole(mask, q, k), scale)
    elif path == "whole":
        with torch.no_grad():
            _, p = block_weights(q, k, _whole(mask, q, k), inplace=True, **score_options)
            head_out, weights = values(p, v, heads), p.mean(dim=1)
    elif path == "recomputed":
        head_out = RecomputedAttention.apply(
            q, k, v, sinks, mask, scale, softcap, view, CHUNK_ELEMENTS
        )
    elif path == "banded":
        with torch.no_grad():
            head_out = _banded(q, k, v, mask, scale=scale)
    elif path in ("blocked", "chunked", "streamed"):
        chunk = CHUNK_ELEMENTS if statistics is None else statistics.chunk_elements
        with torch.no_grad():
            head_out, weights = chunked(
                q,
                k,
                v,
                mask,
                mean=path == "blocked",
                sums=sums,
                chunk_elements=chunk,
                **score_options,
            )
    else:
        head_out = _fused(q, k, v, mask, scale=scale, dropout_p=dropout_p)
    if o.head_scale is not None:
        head_out = head_out * o.head_scale
    if sites is not None:
        head_out = sites("head_outputs", head_out)
    if sums is not None:
        sums.add_outputs(head_out.detach(), _rows_per_chunk(statistics, head_out))
        sums = sums.result()
        if statistics.report is not None:
            statistics.report(sums)
    return Attended(head_out, weights, scores, sums, q, k, v)


def _streaming_sums(
    q: Tensor, k: Tensor, mask: MaskSpec | None, request: StatisticsRequest, sinks: Tensor | None
) -> StreamingSums:
    batch, heads, q_len, _ = q.shape
    return StreamingSums(
        request,
        batch=batch,
        heads=heads,
        q_len=q_len,
        k_len=k.shape[2],
        q_offset=0 if mask is None else mask.q_offset,
        device=q.device,
        dtype=q.dtype,
        sink_logits=sinks is not None,
    )


def _add_whole(sums: StreamingSums, weights: Tensor, v: Tensor, mask: MaskSpec | None) -> None:
    """The sums of whole per-head weights (batch, head, q_pos, k_pos), one chunk of every row."""
    causal = mask is not None and mask.causal and not mask.extra_keys
    outputs = values(weights, v, weights.shape[1])
    rows = slice(0, weights.shape[2])
    sums.merge(sums.chunk(weights, rows, causal_keys=causal, outputs=outputs, values=v))


def _rows_per_chunk(request: StatisticsRequest, head_out: Tensor) -> int:
    batch, heads, _, _ = head_out.shape
    embed = 1 if request.output_weight is None else request.output_weight.shape[0]
    return max(1, request.chunk_elements // max(1, batch * heads * embed))

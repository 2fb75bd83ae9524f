"""The one attention kernel: every path of headlab's attention is this function.

    S = scale * Q K_g^T            (batch, head, q_pos, k_pos); K/V head g = head // group
    S = cap * tanh(S / cap)        optional soft-capping of the logits (Gemma 2)
    S = S + M                      the mask (``MaskSpec``): -inf where hidden, plus any bias
    P = softmax([S | sink])[:k]    optional sink logit per head: a column with no value (gpt-oss)
    O = P V_g                      (batch, head, q_pos, d_value), then the head scale (head_mask)

Grouped K/V heads (GQA/MQA) are never repeated in memory: the query heads of one group are
stacked as rows of one product with their K/V head. A query row that sees no key gets P = 0 and
O = 0. A head view (``head_view`` n < head) scores each group of head/n consecutive heads as one
head, sum_i S_i / sqrt(head/n) (the scores of the re-split projections), and every member of a
group outputs that group's P times its own values: the same weights viewed with fewer heads.

``attend`` picks the path, in one place:
  fused      ``F.scaled_dot_product_attention``: nothing needs the score matrix
  explicit   whole (q_pos, k_pos) tensors with autograd; intervention sites, per-head weights
  averaged   weights averaged over heads with its own backward (``averaged.AveragedAttention``)
  chunked    no autograd, query rows in blocks: the weights are never held whole; per-head
             statistics stream from each block (``statistics.StreamingSums``), and weights
             averaged over heads are accumulated block by block
  banded     a KV plan's layer (causality and a ``KeyBudget``, nothing else, no autograd):
             fused for every head, then the budgeted heads again, a block of queries at a time
             over only the keys they keep (the sinks and the window's band)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.attention.layout import shape_check, static_graph
from headlab.attention.mask_spec import MaskSpec, MergedMask, _outside_window
from headlab.attention.sites import Sites
from headlab.attention.statistics import HeadSums, StatisticsRequest, StreamingSums

# Blocks of the chunked path. For weights averaged over heads: one batch element's heads over
# ``rows`` query rows, about BLOCK_ELEMENTS weights (1 MiB in float32) so that a block stays in
# cache, never fewer than MIN_ROWS rows (BLAS is slow on thinner matrices: 16 rows cost 10x more
# than 64 at seq 2048). Below MIN_BLOCKED per-head weights the whole tensor is about as fast.
BLOCK_ELEMENTS = 2**18
MIN_ROWS = 64
MIN_BLOCKED = 2**20


@dataclass(frozen=True)
class Attended:
    """What one call of ``attend`` returns.

    head_out: (batch, head, q_pos, d_value), after the head scale and the head_outputs site.
    weights: per head (batch, head, q_pos, k_pos), averaged over heads (batch, q_pos, k_pos), or
        None, as ``need_weights`` asked (per head also when an intervention site needed them).
    scores: (batch, head, q_pos, k_pos) S after the mask, when the explicit path ran.
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


# ----------------------------------------------------------------------------- the math, once
def grouped_matmul(a: Tensor, b: Tensor) -> Tensor:
    """a (batch, head, rows, c) @ b (batch, kv_head, c, n) -> (batch, head, rows, n), query head
    i with K/V head i // (head / kv_head): each group's heads stacked as rows, b never copied."""
    batch, _, rows, c = a.shape
    heads, groups = int(a.shape[1]), int(b.shape[1])  # ints also while a graph is traced
    if groups == heads:
        return a @ b
    out = a.reshape(batch, groups, heads // groups * rows, c) @ b
    return out.view(batch, heads, rows, b.shape[-1])


def _merge_view(scores: Tensor, view: int) -> Tensor:
    """(batch, head, q, k) -> (batch, view, q, k): each group of head / view consecutive heads
    summed and divided by sqrt(head / view)."""
    batch, heads, q_len, k_len = scores.shape
    m = heads // view
    return scores.view(batch, view, m, q_len, k_len).sum(dim=2) / math.sqrt(m)


def _softmax(scores: Tensor, sinks: Tensor | None, *, inplace: bool) -> Tensor:
    """softmax over the keys, with a sink logit per head (head,) as an extra column whose weight
    is dropped (rows then sum to less than one)."""
    if sinks is not None:
        column = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]
    if inplace:
        return torch.softmax(scores, dim=-1, out=scores)
    return scores.softmax(dim=-1)


def _values(weights: Tensor, v: Tensor, heads: int) -> Tensor:
    """weights (batch, head|view, q, k) @ v (batch, kv_head, k, d) -> (batch, head, q, d); with a
    view, each view head's weights serve all of its member heads."""
    if weights.shape[1] != heads:
        weights = weights.repeat_interleave(heads // weights.shape[1], dim=1)
    return grouped_matmul(weights, v)


def block_weights(
    q: Tensor,
    k: Tensor,
    mask: MergedMask | None,
    *,
    scale: float,
    softcap: float | None,
    sinks: Tensor | None,
    view: int | None,
    sites: Sites | None = None,
    inplace: bool = False,
) -> tuple[Tensor, Tensor]:
    """(scores S after the mask, weights P) of query rows q (batch, head, rows, d) over keys
    k (batch, kv_head, keys, d), both (batch, head|view, rows, keys). ``inplace`` (no autograd)
    turns the scores into the weights in place: the two are then the same tensor."""
    if inplace and sites is None and softcap is None and view is None:
        s = _scaled_masked(q, k, scale, mask)
    else:
        # Scale q (rows x d) rather than the scores (rows x keys): one pass over the small
        # tensor instead of the big one, and torch's own order of operations.
        s = grouped_matmul(q * scale, k.transpose(-2, -1))  # (batch, head, rows, keys)
        if sites is not None:
            s = sites("logits", s)
        if view is not None:
            s = _merge_view(s, view)
            if mask is not None and mask.additive.shape[1] not in (1, view):
                raise ValueError(
                    f"a mask of {mask.additive.shape[1]} heads cannot go through a view of "
                    f"{view} heads: a view takes masks shared by all heads"
                )
        if softcap is not None:
            s = torch.tanh(s / softcap) * softcap
        if mask is not None:
            s = mask.add_to(s) if inplace else s + mask.additive
    if sites is not None:
        s = sites("scores", s)
    p = _softmax(s, sinks, inplace=inplace)
    if mask is not None and mask.keep is not None:
        p = p.mul_(mask.keep) if inplace else p * mask.keep
    return s, p


def _scaled_masked(q: Tensor, k: Tensor, scale: float, mask: MergedMask | None) -> Tensor:
    """scale * q k^T + mask, in one product where the shapes allow (``baddbmm``: one batch
    element, one K/V head per query head, a whole-width mask without a batch dimension): the
    scale and the mask enter the product itself, so q is never rescaled in a pass of its own
    (measured: 3 to 13% of the block loop at batch 8 x 256 tokens over four runs, nothing at
    1 x 2048)."""
    batch, heads, rows, _ = q.shape
    keys = k.shape[-2]
    additive = None if mask is None else mask.additive
    if batch == 1 and k.shape[1] == heads and (
        mask is None or (mask.first == 0 and additive.shape[0] == 1)
    ):
        shape = (heads, rows, keys)
        base = q.new_zeros(()).expand(shape) if additive is None else additive[0].expand(shape)
        beta = 0.0 if additive is None else 1.0
        s = torch.baddbmm(base, q[0], k[0].transpose(-2, -1), beta=beta, alpha=scale)
        return s.unsqueeze(0)
    s = grouped_matmul(q * scale, k.transpose(-2, -1))
    return s if mask is None else mask.add_to(s)


# ----------------------------------------------------------------------------- the paths
def _fused(
    q: Tensor, k: Tensor, v: Tensor, mask: MaskSpec | None, *, scale: float, dropout_p: float
) -> Tensor:
    """SDPA; the mask materialised once unless plain causality is enough."""
    group = int(q.shape[1]) // int(k.shape[1])
    if group != 1 and torch.jit.is_tracing():  # the ONNX exporter has no SDPA with enable_gqa
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        group = 1
    causal = mask is not None and mask.plain_causal
    merged = None if causal else _whole(mask, q, k)
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=None if merged is None else merged.additive,
        dropout_p=dropout_p,
        is_causal=causal,
        scale=scale,
        enable_gqa=group != 1,
    )
    if merged is not None and merged.keep is not None:
        out = out * merged.keep
    return out


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
    """(head_out, weights, scores) from whole tensors, with autograd and every site."""
    scores, weights = block_weights(
        q, k, _whole(mask, q, k), scale=scale, softcap=softcap, sinks=sinks, view=view, sites=sites
    )
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    if sites is not None:
        weights = sites("weights", weights)
    return _values(weights, v, q.shape[1]), weights, scores


def _chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MaskSpec | None,
    *,
    scale: float,
    softcap: float | None,
    sinks: Tensor | None,
    view: int | None,
    mean: bool,
    sums: StreamingSums | None,
    chunk_elements: int,
) -> tuple[Tensor, Tensor | None]:
    """(head_out, weights averaged over heads or None) without autograd, a block of query rows
    at a time. Averaging: one batch element per block, sized for the cache; statistics: the
    whole batch per chunk of ``chunk_elements`` weights. Causal rows skip the keys after them."""
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    extra = 0 if mask is None else mask.extra_keys
    real = k_len - extra
    out_heads = heads if view is None else view
    # head_out is written position-major, (batch, q_pos, head, d), and returned as its
    # (batch, head, q_pos, d) view: merging the heads for W_O is then free.
    out = q.new_empty(batch, q_len, heads, v.shape[-1])
    averaged = q.new_empty(batch, q_len, k_len) if mean else None
    if mean:
        batch_step, budget = 1, BLOCK_ELEMENTS
        rows_step = min(q_len, max(MIN_ROWS, budget // max(1, out_heads * k_len)))
    else:
        batch_step = batch
        rows_step = max(1, chunk_elements // max(1, batch * out_heads * k_len))
    k, v = k.contiguous(), v.contiguous()  # one copy here, not one per block
    for b0 in range(0, batch, batch_step):
        part = slice(b0, min(b0 + batch_step, batch))
        for start in range(0, q_len, rows_step):
            rows = slice(start, min(start + rows_step, q_len))
            # causal rows see no key after their own position: skip those (extra keys last)
            keys = mask.last_key(rows.stop, real) if mask is not None and not extra else k_len
            merged = None
            if mask is not None:
                merged = mask.block(
                    rows.start, rows.stop, keys, dtype=q.dtype, device=q.device, trim=True
                )
                merged = _batch_part(merged, part)
            _, p = block_weights(
                q[part, :, rows],
                k[part, :, :keys],
                merged,
                scale=scale,
                softcap=softcap,
                sinks=sinks,
                view=view,
                inplace=True,
            )  # (batch', head|view, rows, keys)
            o = _values(p, v[part, :, :keys], heads)  # (batch', head, rows, d)
            out[part, rows] = o.transpose(1, 2)
            if averaged is not None:
                averaged[part, rows, keys:] = 0.0
                torch.mean(p, dim=1, out=averaged[part, rows, :keys])
            if sums is not None:
                causal = mask is not None and mask.causal and not extra
                sums.add(p, rows, causal_keys=causal, outputs=o, values=v[part, :, :keys])
    return out.transpose(1, 2), averaged


def _banded_applies(mask: MaskSpec | None, q: Tensor, k: Tensor, options: dict) -> bool:
    """A KV plan's layer the banded path serves: plain causality plus a ``KeyBudget``, queries
    and keys aligned, no soft-cap, sink logits or view."""
    return (
        mask is not None
        and mask.budget is not None
        and replace(mask, budget=None).plain_causal
        and q.shape[2] == k.shape[2]
        and all(options[name] is None for name in ("softcap", "sinks", "view"))
    )


def _banded(q: Tensor, k: Tensor, v: Tensor, mask: MaskSpec, *, scale: float) -> Tensor:
    """head_out (batch, head, q_pos, d_value) of a causal layer with a ``KeyBudget``: every head
    fused with plain causality, then each budgeted head again over the keys it keeps, a block
    of ``window`` queries at a time: its sinks and the keys from the block's first query's
    window on. The budgeted heads cost O(q_pos x (sinks + 2 window)), not O(q_pos^2); a block's
    mask is ``MaskSpec``'s window on those key positions (one definition of the kept keys)."""
    budget = mask.budget
    out = _fused(q, k, v, replace(mask, budget=None), scale=scale, dropout_p=0.0)
    heads = budget.heads.to(q.device).nonzero()[:, 0]  # (budgeted,)
    if not len(heads):
        return out
    kv = heads // (q.shape[1] // k.shape[1])  # each budgeted head's K/V head
    q_b, k_b, v_b = q[:, heads], k[:, kv], v[:, kv]  # (batch, budgeted, pos, d)
    sinks, size = budget.sinks, budget.window
    step = max(64, size)
    for start in range(0, q.shape[2], step):
        stop = min(start + step, q.shape[2])
        low = max(sinks, start - size + 1)  # the first key of the band any row here sees
        keys = torch.cat([torch.arange(min(sinks, low), device=q.device),
                          torch.arange(low, stop, device=q.device)])  # fmt: skip
        positions = torch.arange(start, stop, device=q.device)
        after = keys[None, None, None, :] > positions[None, None, :, None]  # causality
        hidden = after | _outside_window(positions, keys, size, sinks, None, causal=True)
        block = MaskSpec(attn_mask=hidden)  # (1, 1, rows, keys), True hidden
        out[:, heads, start:stop] = _fused(
            q_b[:, :, start:stop], k_b[:, :, keys], v_b[:, :, keys], block, scale=scale,
            dropout_p=0.0,
        )  # fmt: skip
    return out


def _whole(mask: MaskSpec | None, q: Tensor, k: Tensor) -> MergedMask | None:
    """Every row of ``mask`` over every key of ``k``, for the paths that hold whole scores."""
    if mask is None:
        return None
    return mask.block(0, q.shape[2], k.shape[2], dtype=q.dtype, device=q.device)


def _batch_part(merged: MergedMask | None, part: slice) -> MergedMask | None:
    """The batch elements ``part`` of a block (a broadcast batch dimension stays)."""
    if merged is None:
        return None

    def cut(t: Tensor | None) -> Tensor | None:
        return t if t is None or t.shape[0] == 1 else t[part]

    return MergedMask(cut(merged.additive), cut(merged.keep), merged.first)


# ----------------------------------------------------------------------------- the entry point
# Under torch.jit.trace (the legacy ONNX export) shapes are tensors and every Python use of one
# warns; head counts and group sizes are the module's constants, and the lengths flow as tensors
# into the ops (the recorded graph takes other lengths), so the warnings are silenced.
@shape_check
def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MaskSpec | None = None,
    *,
    scale: float | None = None,
    softcap: float | None = None,
    sinks: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: str | None = None,
    sites: Sites | None = None,
    head_scale: Tensor | None = None,
    head_view: int | None = None,
    statistics: StatisticsRequest | None = None,
) -> Attended:
    """Attention of per-head queries over grouped keys and values (see the module docstring).

    q: (batch, head, q_pos, d_head); k: (batch, kv_head, k_pos, d_head); v: (batch, kv_head,
    k_pos, d_value), head a multiple of kv_head. mask: which keys each query sees (None: all).
    scale: default 1 / sqrt(d_head). softcap: the cap of the logits. sinks: (head,) sink logits.
    need_weights: None, "heads" or "mean". sites: interventions (q, k, v, scores, weights,
    head_outputs). head_scale: (batch|1, head, 1, 1) multiplies each head's output (head_mask).
    head_view: view the heads as this many (a divisor of head). statistics: stream per-head
    sums into ``statistics.report`` (no autograd). Raises ValueError for shapes that do not fit.
    """
    heads, groups = int(q.shape[1]), int(k.shape[1])
    if groups == 0 or heads % groups:
        raise ValueError(f"query heads ({heads}) must be a multiple of K/V heads ({groups})")
    if head_view is not None and (head_view <= 0 or heads % head_view):
        raise ValueError(f"head_view must divide the {heads} query heads, got {head_view}")
    view = None if head_view in (None, heads) else head_view
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    sites = sites if sites else None
    if sites is not None:
        q, k, v = sites("q", q), sites("k", k), sites("v", v)
        if sites.budget is not None:  # a KV plan: its heads see sinks and a window only
            mask = replace(mask or MaskSpec(), budget=sites.budget)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    matrix_sites = sites is not None and sites.touches_scores()
    options = {"scale": scale, "softcap": softcap, "sinks": sinks, "view": view}
    weights = scores = sums = None
    if statistics is not None:  # chunked, or one whole block when a site needs the matrix
        if view is not None:
            raise ValueError("statistics are per head: they cannot be streamed through a view")
        head_out, weights, scores, sums = _streamed(q, k, v, mask, statistics, sites, options)
    elif need_weights == "heads" or matrix_sites or (
        (softcap is not None or sinks is not None or view is not None)
        and (needs_grad or dropout_p > 0 or need_weights is not None or static_graph())
    ):
        head_out, weights, scores = _explicit(
            q, k, v, mask, dropout_p=dropout_p, sites=sites, **options
        )
        if need_weights == "mean":
            weights = weights.mean(dim=1)
    elif need_weights == "mean":
        head_out, weights = _averaged(q, k, v, mask, dropout_p=dropout_p, **options)
    elif (
        _banded_applies(mask, q, k, options)
        and not needs_grad
        and not static_graph()
        and dropout_p == 0.0
    ):
        head_out = _banded(q, k, v, mask, scale=scale)
    elif (softcap is not None or sinks is not None or view is not None) or (
        mask is not None and mask.large and not needs_grad and not static_graph()
    ):  # SDPA cannot do these, or would need a whole (q_pos, k_pos) mask per head
        head_out, _ = _chunked(q, k, v, mask, mean=False, sums=None, **_chunking(options))
    else:
        head_out = _fused(q, k, v, mask, scale=scale, dropout_p=dropout_p)
    if head_scale is not None:
        head_out = head_out * head_scale
    if sites is not None:
        head_out = sites("head_outputs", head_out)
    if sums is not None:
        sums.add_outputs(head_out, _rows_per_chunk(statistics, head_out))
        sums = sums.result()
        if statistics.report is not None:
            statistics.report(sums)
    return Attended(head_out, weights, scores, sums, q, k, v)


def _chunking(options: dict, chunk_elements: int = 2**22) -> dict:
    return {**options, "chunk_elements": chunk_elements}


def _rows_per_chunk(request: StatisticsRequest, head_out: Tensor) -> int:
    batch, heads, _, _ = head_out.shape
    embed = 1 if request.output_weight is None else request.output_weight.shape[0]
    return max(1, request.chunk_elements // max(1, batch * heads * embed))


def _averaged(
    q: Tensor, k: Tensor, v: Tensor, mask: MaskSpec | None, *, dropout_p: float, **options
) -> tuple[Tensor, Tensor]:
    """(head_out, weights averaged over heads): AveragedAttention with autograd, blocks without;
    the explicit path where those do not apply (dropout, a mask that needs a gradient, off the
    CPU, a recorded graph, soft-cap, sinks or a view)."""
    from headlab.attention.averaged import AveragedAttention

    grad_mask = mask is not None and any(
        t is not None and t.requires_grad for t in (mask.attn_mask, mask.bias)
    )
    plain = all(options[name] is None for name in ("softcap", "sinks", "view"))
    if dropout_p > 0.0 or grad_mask or q.device.type != "cpu" or static_graph() or not plain:
        out, weights, _ = _explicit(q, k, v, mask, dropout_p=dropout_p, sites=None, **options)
        return out, weights.mean(dim=1)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad:
        return AveragedAttention.apply(q, k, v, _whole(mask, q, k), options["scale"])
    with torch.no_grad():
        if q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] >= MIN_BLOCKED:
            return _chunked(q, k, v, mask, mean=True, sums=None, **_chunking(options))
        _, p = block_weights(q, k, _whole(mask, q, k), inplace=True, **options)
        return _values(p, v, q.shape[1]), p.mean(dim=1)


def _streamed(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: MaskSpec | None,
    request: StatisticsRequest,
    sites: Sites | None,
    options: dict,
) -> tuple[Tensor, Tensor | None, Tensor | None, StreamingSums]:
    """Statistics of one call: chunks of rows, or one whole block when a site needs the score
    or weight matrix (the sites then see it whole, as in every other run)."""
    batch, heads, q_len, _ = q.shape
    sums = StreamingSums(
        request,
        batch=batch,
        heads=heads,
        q_len=q_len,
        k_len=k.shape[2],
        q_offset=0 if mask is None else mask.q_offset,
        device=q.device,
        dtype=q.dtype,
        sink_logits=options["sinks"] is not None,
    )
    with torch.no_grad():
        if sites is not None and sites.touches_scores():
            head_out, weights, _ = _explicit(
                q, k, v, mask, dropout_p=0.0, sites=sites, **options
            )
            causal = mask is not None and mask.causal and not mask.extra_keys
            outputs = _values(weights, v, heads)  # before the head_outputs site, as chunked
            sums.add(weights, slice(0, q_len), causal_keys=causal, outputs=outputs, values=v)
            return head_out, None, None, sums
        chunking = _chunking(options, request.chunk_elements)
        head_out, _ = _chunked(q, k, v, mask, mean=False, sums=sums, **chunking)
    return head_out, None, None, sums

"""Per-head attention statistics without the (q_pos, k_pos) matrix: queries in chunks.

``attention_statistics(mha, x)`` is ``mha(x, x, x)`` that also returns, per head, the sums over
the counted queries of the statistics below. For each chunk of queries it computes the weights
(batch, head, chunk, k_pos) as the explicit path does (same scaling, masks, softmax), reduces
them to per-query statistics and to the attention each key receives, keeps the chunk's head
outputs and drops the weights. Peak memory: the inputs, q/k/v and one chunk of weights, so it
grows linearly with the length for a fixed chunk (``chunk_elements`` sets the chunk).

Per query q, with w the weights of one head over the keys k (a row that sums to 1, or 0 when
every key is masked):
    entropy            -sum_k w_k ln w_k  (nats)       max_weight  max_k w_k
    self               w_q                            prev        w_{q-1}, queries q >= 1 only
    distance           sum_k w_k |q - k|  (tokens)    <special>   w at each named key position
    contribution_norm  ||head output_q @ W_O block^T||_2, after the head mask
    received           (per key) sum over counted queries of w_k: the "heavy hitter" profile

A causal call without other masks only visits keys 0 .. last query of the chunk (the rest have
zero weight), which halves the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention import layout
from headlab.attention.functional import merge_heads
from headlab.attention.masks import merge_masks
from headlab.attention.module import MultiHeadAttention

PER_QUERY = ("entropy", "max_weight", "self", "prev", "distance", "contribution_norm")
#: Elements (batch x head x chunk x k_pos) of one chunk of weights: 2**22 floats = 16 MiB.
CHUNK_ELEMENTS = 2**22


@dataclass(frozen=True)
class HeadSums:
    """Sums over counted queries, per head, of one attention call (float64).

    sums: name -> (head,): the names of PER_QUERY and of the special positions; "prev" sums over
        counted queries q >= 1 only.
    received: (head, k_pos) attention each key receives, summed over counted queries and batch.
    n_queries: the number of counted queries; n_prev: those with q >= 1.
    """

    sums: dict[str, Tensor]
    received: Tensor
    n_queries: int
    n_prev: int


def _chunk_mask(
    mha: MultiHeadAttention,
    *,
    rows: slice,
    k_len: int,
    attn_mask: Tensor | None,
    key_padding_mask: Tensor | None,
    causal: bool,
    batch: int,
    batched: bool,
    dtype: torch.dtype,
    device: torch.device,
):
    """The merged mask of queries ``rows`` over the first ``k_len`` keys (plus extra keys)."""
    q_len = rows.stop - rows.start
    chunk_attn = None
    if attn_mask is not None:  # as in forward: a given attn_mask wins over is_causal
        chunk_attn = attn_mask[..., rows, :k_len]
    elif causal:  # query rows.start + i may not see key j > rows.start + i
        queries = torch.arange(rows.start, rows.stop, device=device)
        chunk_attn = torch.arange(k_len, device=device)[None, :] > queries[:, None]
    return merge_masks(
        attn_mask=chunk_attn,
        key_padding_mask=None if key_padding_mask is None else key_padding_mask[..., :k_len],
        is_causal=False,
        batch=batch,
        num_heads=mha.num_heads,
        q_len=q_len,
        k_len=k_len,
        extra_keys=int(mha.bias_k is not None) + int(mha.add_zero_attn),
        batched=batched,
        dtype=dtype,
        device=device,
    )


def _grouped_scores(q: Tensor, k: Tensor) -> Tensor:
    """q (batch, head, c, D), k (batch, kv_head, k, D) -> scores (batch, head, c, k), unmasked.

    Consecutive query heads share a K/V head: one matmul per K/V head, no copy of K.
    """
    batch, heads, c, d = q.shape
    groups = k.shape[1]
    q = (q * d**-0.5).reshape(batch, groups, heads // groups * c, d)
    return (q @ k.transpose(-2, -1)).view(batch, heads, c, k.shape[-2])


def _grouped_values(weights: Tensor, v: Tensor) -> Tensor:
    """weights (batch, head, c, k), v (batch, kv_head, k, D) -> (batch, head, c, D)."""
    batch, heads, c, k_len = weights.shape
    groups = v.shape[1]
    out = weights.reshape(batch, groups, heads // groups * c, k_len) @ v
    return out.view(batch, heads, c, v.shape[-1])


def _at(weights: Tensor, keys: Tensor) -> Tensor:
    """weights (batch, head, c, k) at key index keys (batch|1, c) -> (batch, head, c); 0 where
    the index is outside 0 .. k - 1 (a key this chunk did not visit has zero weight)."""
    batch, heads, c, k_len = weights.shape
    index = keys.clamp(0, k_len - 1).view(-1, 1, c, 1).expand(batch, heads, c, 1)
    inside = ((keys >= 0) & (keys < k_len)).view(-1, 1, c)
    return weights.gather(-1, index).squeeze(-1) * inside


def _project(mha: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor):
    """Inputs in the module's layout -> (batched, q (b, H, q_pos, D), k and v (b, G, k_pos, D)),
    q and k rotated when the module has rotary positions (as forward computes them)."""
    batched, xq, xk, xv = mha._inputs(query, key, value)
    return (batched, *mha._project(xq, xk, xv))


def attention_statistics(
    mha: MultiHeadAttention,
    query: Tensor,
    key: Tensor | None = None,
    value: Tensor | None = None,
    *,
    key_padding_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    head_mask: Tensor | None = None,
    query_mask: Tensor | None = None,
    special: Mapping[str, Tensor] | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> tuple[Tensor, HeadSums]:
    """``mha(query, key, value, ...)[0]`` and the per-head sums of its statistics (no autograd).

    Arguments as in ``MultiHeadAttention.forward`` (key and value default to query), plus
    query_mask: (batch, q_pos) bool, True on the queries to count (default: all);
    special: name -> (batch,) int64 key index whose weight is summed as statistic ``name``;
    chunk_elements: the size of one chunk of weights (batch x head x chunk x k_pos elements).
    Raises ValueError for a module in training mode with dropout (statistics are of eval).
    """
    if mha.training and mha.dropout > 0:
        raise ValueError("attention_statistics needs the module in eval mode (dropout > 0)")
    key = query if key is None else key
    value = key if value is None else value
    with torch.no_grad():
        batched, q, k, v = _project(mha, query, key, value)
        batch, heads, q_len, _ = q.shape
        k_total = k.shape[-2]
        extra = int(mha.bias_k is not None) + int(mha.add_zero_attn)
        causal = (is_causal or mha.causal) and attn_mask is None
        shortcut = causal and extra == 0  # keys after the chunk's last query have zero weight
        counted = (
            torch.ones(batch, q_len, dtype=q.dtype, device=q.device)
            if query_mask is None
            else query_mask.reshape(batch, q_len).to(q.device, q.dtype)
        )  # (batch, q_pos)
        scale = layout.head_scale(head_mask, batch, heads)  # (batch|1, head, 1, 1)
        w_o = mha.out_proj.weight.view(mha.embed_dim, heads, mha.head_dim)
        special = {name: index.to(q.device) for name, index in (special or {}).items()}
        totals = {"dtype": torch.float64, "device": q.device}
        sums = {name: torch.zeros(heads, **totals) for name in (*PER_QUERY, *special)}
        received = torch.zeros(heads, k_total, **totals)
        chunk = max(1, chunk_elements // max(1, batch * heads * k_total))
        outputs = []
        k, v = k.contiguous(), v.contiguous()  # one copy here, not one per chunk
        key_index = torch.arange(k_total, device=q.device, dtype=q.dtype)  # (k_pos,)
        lowest = torch.finfo(q.dtype).min
        for start in range(0, q_len, chunk):
            rows = slice(start, min(start + chunk, q_len))
            positions = torch.arange(rows.start, rows.stop, device=q.device)  # (c,)
            # shortcut: only keys 0 .. rows.stop - 1, and they need a mask on the last c only
            keys = min(rows.stop, k_total) if shortcut else k_total
            scores = _grouped_scores(q[:, :, rows], k[..., :keys, :])  # (batch, head, c, keys)
            if shortcut and key_padding_mask is None:
                mask = None
                hidden = positions[:, None] < torch.arange(rows.start, keys, device=q.device)
                scores[..., rows.start :].masked_fill_(hidden, lowest)  # the (c, c) block only
            else:
                mask = _chunk_mask(
                    mha,
                    rows=rows,
                    k_len=keys - extra,
                    attn_mask=attn_mask,
                    key_padding_mask=key_padding_mask,
                    causal=causal,
                    batch=batch,
                    batched=batched,
                    dtype=q.dtype,
                    device=q.device,
                )
                if mask is not None:
                    scores = (scores + mask.additive).clamp_(min=lowest)
            # softmax by hand, to keep log Z: entropy = log Z - sum_k w_k (s_k - max s), and
            # max_weight = 1 / Z. Masked scores are the lowest float, not -inf: w_k (s_k - max)
            # is then 0 x finite = 0 (exp underflows to exactly 0).
            scores.sub_(scores.amax(dim=-1, keepdim=True))  # s - max s <= 0
            weights = scores.exp()
            z = weights.sum(dim=-1, keepdim=True)  # (batch, head, c, 1)
            weights.div_(z)
            entropy = z.squeeze(-1).log() - torch.linalg.vecdot(weights, scores)
            max_weight = z.squeeze(-1).reciprocal()
            del scores
            if mask is not None and mask.keep is not None:  # fully masked rows: all zero
                weights = weights * mask.keep
                entropy, max_weight = entropy * mask.keep[..., 0], max_weight * mask.keep[..., 0]
            head_out = _grouped_values(weights, v[..., :keys, :])  # (batch, head, c, D)
            if scale is not None:
                head_out = head_out * scale
            outputs.append(head_out)
            if shortcut:  # every weight is on a key k <= q: sum_k w_k (q - k)
                distance = positions.to(q.dtype) * weights.sum(-1) - weights @ key_index[:keys]
            else:
                offsets = (positions[:, None].to(q.dtype) - key_index[None, :keys]).abs_()
                distance = (weights * offsets).sum(dim=-1)
            per_query = {
                "entropy": entropy,
                "max_weight": max_weight,
                "self": _at(weights, positions[None, :]),
                "distance": distance,
                "contribution_norm": torch.einsum("bhqd,ehd->bhqe", head_out, w_o).norm(dim=-1),
            }
            prev = _at(weights, positions[None, :] - 1)
            for name, index in special.items():
                per_query[name] = _at(weights, index.view(batch, 1).expand(batch, len(positions)))
            weight = counted[:, None, rows]  # (batch, 1, c)
            for name, value_ in per_query.items():
                sums[name] += (value_ * weight).sum(dim=(0, 2)).to(torch.float64)
            sums["prev"] += (prev * weight * (positions >= 1)).sum(dim=(0, 2)).to(torch.float64)
            seen = counted[:, None, None, rows] @ weights  # (batch, head, 1, keys), no copy
            received[:, :keys] += seen.sum(dim=(0, 2)).to(torch.float64)
        head_out = torch.cat(outputs, dim=2)  # (batch, head, q_pos, D)
        output = layout.from_batch_first(
            mha.out_proj(merge_heads(head_out)), batched=batched, batch_first=mha.batch_first
        )
    n_queries = int(counted.sum())
    n_prev = int(counted[:, 1:].sum())
    sums = {name: value.cpu() for name, value in sums.items()}
    return output, HeadSums(sums, received.cpu(), n_queries, n_prev)

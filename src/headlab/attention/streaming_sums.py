"""Per-head statistics summed chunk by chunk as the kernel computes the weights, never held whole.

The kernel (``headlab.attention.kernel``) hands each chunk of weights (batch, head, rows, keys)
to ``StreamingSums.chunk``, which reduces it to per-query statistics and to the attention each key
receives, then drops it. Per query q, with w the weights of one head over the keys k (a row that
sums to 1, or 0 when every key is masked):

    entropy            -sum_k w_k ln w_k  (nats)       max_weight  max_k w_k
    self               w_q                            prev        w_{q-1}, queries q >= 1 only
    distance           sum_k w_k |q - k|  (tokens)    <special>   w at each named key position
    contribution_norm  ||head output_q @ W_O block^T||_2, after the head mask and interventions;
                       left out (no entry at all, never a 0 or a NaN) when the request has no
                       W_O: a layer that changes the heads' outputs before its output projection
                       (a gate) has no block of W_O that maps one head's output alone
    received           (per key) sum over counted queries of w_k: the "heavy hitter" profile

and, when the request asks for them:

    window_error       ||o_q - o_q^window|| / ||o_q||: how much of the head's output o_q = sum_k
                       w_k v_k is lost if it could only see the first ``sinks`` keys and the
                       last ``window`` ones (o^window: the same weights renormalised over those
                       keys, and, for a head with a sink logit (gpt-oss), over the sink's own
                       weight too, as the masked run's softmax keeps it), exactly, from the same
                       weights (DuoAttention's streaming heads); the mean over every counted
                       query, the first sinks + window ones included (they lose nothing: 0)
    copy_weight        at copy positions (``copy_sources`` >= 0: the key position of the earlier
                       occurrence of the next token), w at that key (induction on the text's own
                       repeats); ``copy_hits`` records per copy position whether the head's
                       largest weight is on it (Wu et al.'s retrieval, before the model's own
                       prediction is checked)
    blocks             (q_block, k_block) sums of w: the mass each block of ``block`` queries
                       sends to each block of ``block`` keys, and ``block_rows``: the counted
                       queries of each query block

Positions are key positions: query row i sits at ``q_offset + i`` (``MaskSpec.q_offset``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from headlab.attention.block import grouped_matmul
from headlab.attention.functional import entropy
from headlab.attention.output_norms import contribution_norms, head_factors

PER_QUERY = ("entropy", "max_weight", "self", "prev", "distance", "contribution_norm")
#: Elements (batch x head x chunk x k_pos) of one chunk of weights: 2**22 floats = 16 MiB.
CHUNK_ELEMENTS = 2**22


@dataclass(frozen=True)
class HeadSums:
    """Sums over counted queries, per head, of one attention call (float64).

    sums: name -> (head,): the names of PER_QUERY (without "contribution_norm" when the
        request had no W_O) and of the special positions, and "window_error" and "copy_weight"
        when asked; "prev" sums over counted queries q >= 1
        only, "copy_weight" over the copy positions.
    received: (head, k_pos) attention each key receives, summed over counted queries and batch.
    n_queries: the number of counted queries; n_prev: those with q >= 1; n_copy: the counted
        copy positions.
    copy_hits: (head, n_copy) bool, batch-major in position order: the head's largest weight is
        on the copy position's source; None unless asked.
    blocks: (head, q_blocks, k_blocks) float64 mass sums; block_rows: (q_blocks,) counted
        queries per query block; None unless asked.
    """

    sums: dict[str, Tensor]
    received: Tensor
    n_queries: int
    n_prev: int
    n_copy: int = 0
    copy_hits: Tensor | None = None
    blocks: Tensor | None = None
    block_rows: Tensor | None = None


@dataclass
class StatisticsRequest:
    """What to stream in each call of a layer, and where its sums go.

    query_mask: (batch, q_pos) bool, True on the queries to count (None: all).
    special: name -> (batch,) int64 key index whose weight is summed as statistic ``name``.
    output_weight: W_O (embed_dim, head * d_head), for the contribution norms (None: none are
        summed).
    chunk_elements: the size of one chunk of weights (batch x head x chunk x k_pos elements).
    report: called with each call's HeadSums.
    window: (sinks, window) for ``window_error``, or None.
    copy_sources: (batch, q_pos) int64, the key position of the earlier occurrence of the next
        token at each copy position, -1 elsewhere; or None.
    block: the block size of the blocked attention map, or None.
    tap: called with each chunk's weights (batch, head, c, keys) and the key positions of its
        query rows (a slice), before they are dropped: a caller that keeps part of them (one
        head's exact tiles, ``heads.one_head_pattern``); chunks may come from several threads,
        each with rows of its own.
    """

    query_mask: Tensor | None = None
    special: Mapping[str, Tensor] = field(default_factory=dict)
    output_weight: Tensor | None = None
    chunk_elements: int = CHUNK_ELEMENTS
    report: Callable[[HeadSums], None] | None = None
    window: tuple[int, int] | None = None
    copy_sources: Tensor | None = None
    block: int | None = None
    tap: Callable[[Tensor, slice], None] | None = None


@dataclass
class ChunkSums:
    """What one chunk of query rows adds to ``StreamingSums`` (float64 sums, per head).

    rows: the chunk's query rows. sums: name -> (head,), the chunk's share of each sum.
    received: (head, keys) the weight each of the chunk's keys receives. hits: (head, batch, c)
    the copy hits of these rows, or None. block_mass: (head, c, k_blocks') the mass from each of
    the rows to each block of keys, or None.
    """

    rows: slice
    sums: dict[str, Tensor]
    received: Tensor
    hits: Tensor | None = None
    block_mass: Tensor | None = None


def _at(weights: Tensor, keys: Tensor) -> Tensor:
    """weights (batch, head, c, k) at key index keys (batch|1, c) -> (batch, head, c); 0 where
    the index is outside 0 .. k - 1 (a key this chunk did not visit has zero weight)."""
    batch, heads, c, k_len = weights.shape
    index = keys.clamp(0, k_len - 1).view(-1, 1, c, 1).expand(batch, heads, c, 1)
    inside = ((keys >= 0) & (keys < k_len)).view(-1, 1, c)
    return weights.gather(-1, index).squeeze(-1) * inside


class StreamingSums:
    """The running sums of one call: ``merge`` each ``chunk`` of weights, ``add_outputs`` the head
    outputs once they are final, then ``result``."""

    def __init__(
        self,
        request: StatisticsRequest,
        *,
        batch: int,
        heads: int,
        q_len: int,
        k_len: int,
        q_offset: int,
        device: torch.device,
        dtype: torch.dtype,
        sink_logits: bool = False,
    ) -> None:
        self.request = request
        self.sink_logits = sink_logits  # a sink column takes weight: rows sum to less than 1
        mask = request.query_mask
        self.counted = (
            torch.ones(batch, q_len, dtype=dtype, device=device)
            if mask is None
            else mask.reshape(batch, q_len).to(device, dtype)
        )  # (batch, q_pos)
        self.special = {name: index.to(device) for name, index in request.special.items()}
        totals = {"dtype": torch.float64, "device": device}
        extra = [
            n
            for n, asked in (
                ("window_error", request.window),
                ("copy_weight", request.copy_sources),
            )
            if asked is not None
        ]
        plain = [
            n for n in PER_QUERY if n != "contribution_norm" or request.output_weight is not None
        ]
        names = (*plain, *self.special, *extra)
        self.sums = {name: torch.zeros(heads, **totals) for name in names}
        self.received = torch.zeros(heads, k_len, **totals)
        self.q_offset = q_offset
        self.batch = batch
        self.key_index = torch.arange(k_len, device=device, dtype=dtype)  # (k_pos,)
        self.sources = None
        if request.copy_sources is not None:
            self.sources = request.copy_sources.reshape(batch, q_len).to(device)
            self.sources = self.sources.masked_fill(self.counted == 0, -1)  # (batch, q_pos)
        self.hits = torch.zeros(heads, batch, q_len, dtype=torch.bool, device=device)
        self.blocks = None
        if request.block is not None:
            q_blocks = -(-(q_offset + q_len) // request.block)
            k_blocks = -(-k_len // request.block)
            self.blocks = torch.zeros(heads, q_blocks, k_blocks, **totals)

    def chunk(
        self,
        weights: Tensor,
        rows: slice,
        *,
        causal_keys: bool,
        outputs: Tensor | None = None,
        values: Tensor | None = None,
    ) -> ChunkSums:
        """What one chunk adds, without adding it (``merge`` adds it): weights (batch, head, c,
        keys) of query rows ``rows`` over keys 0 .. keys - 1 (every later key has zero weight).
        ``causal_keys``: no weight falls on a key after its query (then distance needs no
        absolute value, and the window is one-sided). outputs (batch, head, c, d) = weights @
        values and values (batch, kv_head, keys, d) serve the window error. This reads the
        running sums' settings only, so chunks can be reduced on several threads and merged in
        order."""
        keys = weights.shape[-1]
        dtype = weights.dtype
        if self.request.tap is not None:
            self.request.tap(weights, slice(rows.start + self.q_offset, rows.stop + self.q_offset))
        positions = torch.arange(rows.start, rows.stop, device=weights.device) + self.q_offset
        if causal_keys:  # every weight is on a key k <= q: sum_k w_k (q - k)
            distance = positions.to(dtype) * weights.sum(-1) - weights @ self.key_index[:keys]
        else:
            offsets = (positions[:, None].to(dtype) - self.key_index[None, :keys]).abs_()
            distance = (weights * offsets).sum(dim=-1)
        per_query = {
            "entropy": entropy(weights),
            "max_weight": weights.amax(-1) if keys else weights.sum(-1),
            "self": _at(weights, positions[None, :]),
            "distance": distance,
        }
        c = rows.stop - rows.start
        for name, index in self.special.items():
            per_query[name] = _at(weights, index.view(self.batch, 1).expand(self.batch, c))
        per_query["prev"] = _at(weights, positions[None, :] - 1) * (positions >= 1)
        weight = self.counted[:, None, rows]  # (batch, 1, c)
        # one weighted sum of every statistic: a chunk of causal rows is small at short lengths,
        # where a reduction per statistic costs more than the arithmetic
        stacked = torch.stack(list(per_query.values()))  # (statistic, batch, head, c)
        totals = (stacked * weight).sum(dim=(1, 3)).to(torch.float64)  # (statistic, head)
        sums = dict(zip(per_query, totals.unbind(0), strict=True))
        seen = self.counted[:, None, None, rows] @ weights  # (batch, head, 1, keys), no copy
        part = ChunkSums(rows, sums, seen.sum(dim=(0, 2)).to(torch.float64))
        if self.request.window is not None:
            error = window_error(
                weights,
                values,
                outputs,
                positions,
                self.request.window,
                causal=causal_keys,
                sink_logits=self.sink_logits,
            )
            sums["window_error"] = (error * weight).sum(dim=(0, 2)).to(torch.float64)
        if self.sources is not None:
            self._chunk_copies(weights, rows, part)
        if self.blocks is not None:
            part.block_mass = self._block_mass(weights, weight)
        return part

    def merge(self, part: ChunkSums) -> None:
        """Add one chunk's sums (``chunk``) to the running sums."""
        for name, value in part.sums.items():
            self.sums[name] += value
        self.received[:, : part.received.shape[-1]] += part.received
        if part.hits is not None:
            self.hits[:, :, part.rows] = part.hits
        if part.block_mass is not None:  # into the query blocks of the chunk's rows
            rows = torch.arange(part.rows.start, part.rows.stop, device=self.blocks.device)
            q_blocks = (rows + self.q_offset) // self.request.block  # (c,)
            target = self.blocks[:, :, : part.block_mass.shape[-1]]
            target.index_add_(1, q_blocks, part.block_mass)

    def _chunk_copies(self, weights: Tensor, rows: slice, part: ChunkSums) -> None:
        """Weight on, and argmax at, each copy position's source (batch-major order)."""
        sources = self.sources[:, rows]  # (batch, c)
        valid = sources >= 0
        if not bool(valid.any()):
            return
        on_source = _at(weights, sources)  # (batch, head, c); 0 where the source is -1
        part.sums["copy_weight"] = on_source.sum(dim=(0, 2)).to(torch.float64)
        # argmax only where the source holds the row's largest weight (a hit needs that; the
        # first maximum decides ties): one pass of amax instead of argmax over every row
        maybe = (on_source == weights.amax(dim=-1)) & valid[:, None, :]  # (batch, head, c)
        hits = torch.zeros_like(maybe)
        where = maybe.nonzero(as_tuple=True)
        if where[0].numel():
            first = weights[where].argmax(dim=-1)  # (candidates,)
            hits[where] = first == sources[where[0], where[2]]
        part.hits = hits.transpose(0, 1)  # (head, batch, c)

    def _block_mass(self, weights: Tensor, counted: Tensor) -> Tensor:
        """(head, c, k_blocks') mass from this chunk's queries to each block of keys."""
        size = self.request.block
        keys = weights.shape[-1]
        padded = -(-keys // size) * size
        w = torch.nn.functional.pad(weights * counted[..., None], (0, padded - keys))
        # (batch, head, c, k_blocks)
        per_key_block = w.view(*w.shape[:-1], padded // size, size).sum(-1)
        return per_key_block.sum(0).to(torch.float64)

    def add_outputs(self, head_out: Tensor, rows_per_chunk: int) -> None:
        """The contribution norms ||head_out_q @ W_O block^T|| of the final head outputs
        (batch, head, q_pos, d_head), a chunk of rows at a time."""
        w_o = self.request.output_weight
        if w_o is None:
            return
        _, heads, q_len, _ = head_out.shape
        factors = head_factors(w_o, heads)  # (head, r, d_head): ||W_h o|| = ||R_h o||
        for start in range(0, q_len, rows_per_chunk):
            rows = slice(start, min(start + rows_per_chunk, q_len))
            norm = contribution_norms(head_out[:, :, rows], factors)  # (batch, head, c)
            weight = self.counted[:, None, rows]
            self.sums["contribution_norm"] += (norm * weight).sum(dim=(0, 2)).to(torch.float64)

    def result(self) -> HeadSums:
        positions = torch.arange(self.counted.shape[1], device=self.counted.device)
        absolute = positions + self.q_offset
        n_prev = int(self.counted[:, absolute >= 1].sum())
        sums = {name: value.cpu() for name, value in self.sums.items()}
        n_copy, hits = 0, None
        if self.sources is not None:
            valid = self.sources >= 0  # (batch, q_pos)
            n_copy = int(valid.sum())
            hits = self.hits[:, valid].cpu()  # (head, n_copy), batch-major
        blocks = rows = None
        if self.blocks is not None:
            size = self.request.block
            rows = torch.zeros(self.blocks.shape[1], dtype=torch.float64)
            rows.index_add_(0, (absolute // size).cpu(), self.counted.sum(0).double().cpu())
            blocks = self.blocks.cpu()
        return HeadSums(
            sums, self.received.cpu(), int(self.counted.sum()), n_prev, n_copy, hits, blocks, rows
        )


def window_error(
    weights: Tensor,
    values: Tensor,
    outputs: Tensor,
    positions: Tensor,
    window: tuple[int, int],
    *,
    causal: bool,
    sink_logits: bool = False,
) -> Tensor:
    """||o - o^window|| / ||o|| per query (batch, head, c): o = outputs (batch, head, c, d), the
    head's output from weights (batch, head, c, keys) and values (batch, kv_head, keys, d);
    o^window the same weights renormalised over the first ``sinks`` keys and the keys within
    ``size`` of the query (before it when ``causal``), computed from that band of keys only.
    ``sink_logits``: the weights come from a softmax with a sink column (each row sums to
    1 - the sink's weight); the run with the far keys masked keeps that column, so the sink's
    weight 1 - sum_k w_k joins the denominator: o^window = sum_kept w_k v_k / (sum_kept w_k +
    w_sink), exactly the masked run's output. A query that puts no weight there loses its
    whole output (error 1); a zero output, none."""
    sinks, size = window
    keys = weights.shape[-1]
    first, last = int(positions[0]), int(positions[-1])
    lo = max(sinks, first - size + 1, 0)
    hi = min(keys, last + 1 if causal else last + size)
    sink_w = weights[..., : min(sinks, keys)]  # (batch, head, c, sinks)
    num = grouped_matmul(sink_w, values[:, :, : sink_w.shape[-1]])
    den = sink_w.sum(-1)
    if hi > lo:
        offset = positions[:, None] - torch.arange(lo, hi, device=weights.device)[None, :]
        inside = (offset < size) & (offset >= 0) if causal else offset.abs() < size
        band = weights[..., lo:hi] * inside  # (batch, head, c, hi - lo)
        num = num + grouped_matmul(band, values[:, :, lo:hi])
        den = den + band.sum(-1)
    if sink_logits:  # the sink column's weight, which the masked softmax keeps
        den = den + (1 - weights.sum(-1)).clamp_min(0)
    o_window = num / den.clamp_min(torch.finfo(den.dtype).tiny)[..., None]
    lost = (outputs - o_window).norm(dim=-1)
    full = outputs.norm(dim=-1)
    return torch.where(full > 0, lost / full.clamp_min(torch.finfo(full.dtype).tiny), 0.0)


@contextmanager
def observing(layer, request: StatisticsRequest) -> Iterator[None]:
    """Within the block, every call of ``layer`` (anything with ``sites``) streams ``request``'s
    statistics to ``request.report``, through whatever interventions the layer has. Raises
    ValueError when the layer is observed already."""
    if layer.sites.statistics is not None:
        raise ValueError("this attention layer is observed already (one request at a time)")
    layer.sites.statistics = request
    try:
        yield
    finally:
        layer.sites.statistics = None

"""Per-head statistics summed chunk by chunk as the kernel computes the weights, never held whole.

The kernel (``headlab.attention.kernel``) hands each chunk of weights (batch, head, rows, keys)
to ``StreamingSums.add``, which reduces it to per-query statistics and to the attention each key
receives, then drops it. Per query q, with w the weights of one head over the keys k (a row that
sums to 1, or 0 when every key is masked):

    entropy            -sum_k w_k ln w_k  (nats)       max_weight  max_k w_k
    self               w_q                            prev        w_{q-1}, queries q >= 1 only
    distance           sum_k w_k |q - k|  (tokens)    <special>   w at each named key position
    contribution_norm  ||head output_q @ W_O block^T||_2, after the head mask and interventions
    received           (per key) sum over counted queries of w_k: the "heavy hitter" profile

Positions are key positions: query row i sits at ``q_offset + i`` (``MaskSpec.q_offset``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from headlab.attention.functional import entropy

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


@dataclass
class StatisticsRequest:
    """What to stream in each call of a layer, and where its sums go.

    query_mask: (batch, q_pos) bool, True on the queries to count (None: all).
    special: name -> (batch,) int64 key index whose weight is summed as statistic ``name``.
    output_weight: W_O (embed_dim, head * d_head), for the contribution norms.
    chunk_elements: the size of one chunk of weights (batch x head x chunk x k_pos elements).
    report: called with each call's HeadSums.
    """

    query_mask: Tensor | None = None
    special: Mapping[str, Tensor] = field(default_factory=dict)
    output_weight: Tensor | None = None
    chunk_elements: int = CHUNK_ELEMENTS
    report: Callable[[HeadSums], None] | None = None


def _at(weights: Tensor, keys: Tensor) -> Tensor:
    """weights (batch, head, c, k) at key index keys (batch|1, c) -> (batch, head, c); 0 where
    the index is outside 0 .. k - 1 (a key this chunk did not visit has zero weight)."""
    batch, heads, c, k_len = weights.shape
    index = keys.clamp(0, k_len - 1).view(-1, 1, c, 1).expand(batch, heads, c, 1)
    inside = ((keys >= 0) & (keys < k_len)).view(-1, 1, c)
    return weights.gather(-1, index).squeeze(-1) * inside


class StreamingSums:
    """The running sums of one call: ``add`` each chunk of weights, ``add_outputs`` the head
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
    ) -> None:
        self.request = request
        mask = request.query_mask
        self.counted = (
            torch.ones(batch, q_len, dtype=dtype, device=device)
            if mask is None
            else mask.reshape(batch, q_len).to(device, dtype)
        )  # (batch, q_pos)
        self.special = {name: index.to(device) for name, index in request.special.items()}
        totals = {"dtype": torch.float64, "device": device}
        self.sums = {name: torch.zeros(heads, **totals) for name in (*PER_QUERY, *self.special)}
        self.received = torch.zeros(heads, k_len, **totals)
        self.q_offset = q_offset
        self.batch = batch
        self.key_index = torch.arange(k_len, device=device, dtype=dtype)  # (k_pos,)

    def add(self, weights: Tensor, rows: slice, *, causal_keys: bool) -> None:
        """One chunk: weights (batch, head, c, keys) of query rows ``rows`` over keys 0 ..
        keys - 1 (every later key has zero weight). ``causal_keys``: no weight falls on a key
        after its query (then distance needs no absolute value)."""
        keys = weights.shape[-1]
        dtype = weights.dtype
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
        weight = self.counted[:, None, rows]  # (batch, 1, c)
        for name, value in per_query.items():
            self.sums[name] += (value * weight).sum(dim=(0, 2)).to(torch.float64)
        prev = _at(weights, positions[None, :] - 1)
        self.sums["prev"] += (prev * weight * (positions >= 1)).sum(dim=(0, 2)).double()
        seen = self.counted[:, None, None, rows] @ weights  # (batch, head, 1, keys), no copy
        self.received[:, :keys] += seen.sum(dim=(0, 2)).to(torch.float64)

    def add_outputs(self, head_out: Tensor, rows_per_chunk: int) -> None:
        """The contribution norms ||head_out_q @ W_O block^T|| of the final head outputs
        (batch, head, q_pos, d_head), a chunk of rows at a time."""
        w_o = self.request.output_weight
        if w_o is None:
            return
        _, heads, q_len, d_head = head_out.shape
        w_o = w_o.view(w_o.shape[0], heads, d_head)  # (embed, head, d_head)
        for start in range(0, q_len, rows_per_chunk):
            rows = slice(start, min(start + rows_per_chunk, q_len))
            norm = torch.einsum("bhqd,ehd->bhqe", head_out[:, :, rows], w_o).norm(dim=-1)
            weight = self.counted[:, None, rows]
            self.sums["contribution_norm"] += (norm * weight).sum(dim=(0, 2)).to(torch.float64)

    def result(self) -> HeadSums:
        positions = torch.arange(self.counted.shape[1], device=self.counted.device)
        n_prev = int(self.counted[:, (positions + self.q_offset) >= 1].sum())
        sums = {name: value.cpu() for name, value in self.sums.items()}
        return HeadSums(sums, self.received.cpu(), int(self.counted.sum()), n_prev)


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

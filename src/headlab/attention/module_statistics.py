"""Per-head attention statistics of one module call without the (q_pos, k_pos) matrix.

``attention_statistics(mha, x)`` is ``mha(x, x, x)`` that also returns, per head, the sums over
the counted queries of the statistics of ``headlab.attention.streaming_sums``: the module runs its
usual forward with a statistics request attached (``statistics.observing``), so its kernel takes
queries in chunks, reduces each chunk of weights and drops it, through every intervention the
module has. Peak memory: the inputs, q/k/v and one chunk of weights, so it grows linearly with
the length for a fixed chunk (``chunk_elements`` sets the chunk). A causal call only visits keys
0 .. last query of the chunk (the rest have zero weight), which halves the work.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from headlab.attention.module import MultiHeadAttention
from headlab.attention.streaming_sums import (
    CHUNK_ELEMENTS,
    PER_QUERY,
    HeadSums,
    StatisticsRequest,
    observing,
)

__all__ = ["CHUNK_ELEMENTS", "PER_QUERY", "HeadSums", "attention_statistics"]


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
    collected: list[HeadSums] = []
    request = StatisticsRequest(
        query_mask=query_mask,
        special=dict(special or {}),
        chunk_elements=chunk_elements,
        report=collected.append,
    )
    with torch.no_grad(), observing(mha, request):
        output, _ = mha(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            attn_mask=attn_mask,
            is_causal=is_causal,
            head_mask=head_mask,
        )
    return output, collected[0]

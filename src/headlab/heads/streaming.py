"""Run a model once and collect every head's statistics on the way, without the weights.

Each attention layer of the model is wrapped, for one forward, in a probe that computes its
output with ``headlab.attention.streaming.attention_statistics`` (queries in chunks) and hands
the layer's per-head sums back. Works for any model behind ``HeadModel``: the model computes its
own masks (padding, causal) and passes them to the attention as usual.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from headlab.attention import MultiHeadAttention
from headlab.attention.streaming import CHUNK_ELEMENTS, HeadSums, attention_statistics
from headlab.models.interface import HeadMask, HeadModel, TokenBatch


class _Probe(nn.Module):
    """Called like the attention it wraps; returns (output, None) and reports the head sums."""

    def __init__(
        self,
        attention: MultiHeadAttention,
        batch: TokenBatch,
        special: dict[str, Tensor],
        report: Callable[[HeadSums], None],
        chunk_elements: int,
    ) -> None:
        super().__init__()
        self.attention = attention
        self._batch, self._special, self._report = batch, special, report
        self._chunk_elements = chunk_elements

    @property
    def num_heads(self) -> int:
        return self.attention.num_heads

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        *,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, None]:
        output, sums = attention_statistics(
            self.attention,
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            is_causal=is_causal,
            head_mask=head_mask,
            query_mask=self._batch.attention_mask,
            special=self._special,
            chunk_elements=self._chunk_elements,
        )
        self._report(sums)
        return output, None


def model_head_sums(
    model: HeadModel,
    batch: TokenBatch,
    *,
    head_mask: HeadMask = None,
    chunk_elements: int = CHUNK_ELEMENTS,
    on_layer: Callable[[int], None] | None = None,
) -> tuple[Tensor, list[HeadSums]]:
    """One forward of ``model`` on ``batch``: (its output, the head sums of each layer).

    Real tokens (``batch.attention_mask``) are the counted queries; the model's special
    positions are summed as statistics of their own. on_layer(i) is called after layer i.
    """
    special = model.special_positions(batch)
    collected: list[HeadSums] = []

    def report(sums: HeadSums) -> None:
        collected.append(sums)
        if on_layer is not None:
            on_layer(len(collected))

    probes = {
        i: _Probe(attention, batch, special, report, chunk_elements)
        for i, attention in enumerate(model.attention_layers())
    }
    with torch.no_grad():
        output = model.with_attention(probes).run(batch, head_mask)
    return output, collected

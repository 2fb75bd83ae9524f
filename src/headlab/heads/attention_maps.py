"""Where each head's attention goes along one long text, small enough to keep and to draw.

From the sums of one streaming pass (``headlab.attention.streaming_sums``):

    blocked    (layer, head, q_block, k_block): the mean weight a query of each block of
               ``block`` positions puts on each block of keys (its rows sum to one, or less
               for a model with sink logits); at most ``MAX_BLOCKS`` blocks a side
    received   (layer, head, bin): the attention each key receives, summed over the queries and
               over the keys of each bin of ``bin`` positions (at most ``MAX_BINS`` bins): the
               heavy-hitter profile along the whole text
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.results.attention_maps_result import AttentionMaps

# Blocks a side of a blocked map: 8192 tokens in blocks of 128, 4096 and fewer in blocks of 64.
# At 8192 tokens and 270 heads (SmolLM2) the results file weighs about 17 MB and the report's
# explorer 3.4 MB; 64-token blocks there (128 a side) would weigh 61 MB and 12 MB.
MAX_BLOCKS = 64
MAX_BINS = 512  # bins of a received profile


def block_size(n_tokens: int) -> int:
    """Positions per block so that a text of ``n_tokens`` has at most MAX_BLOCKS blocks."""
    return max(1, -(-n_tokens // MAX_BLOCKS))


def attention_maps(blocks: Tensor, rows: Tensor, received: Tensor, block: int) -> AttentionMaps:
    """The maps as a results file holds them: blocks (layer, head, q_blocks, k_blocks) mass sums
    and rows (q_blocks,) counted queries; received (layer, head, k_pos) summed weights, binned to
    at most MAX_BINS bins."""
    blocked = blocks / rows.clamp_min(1)[None, None, :, None]
    k_pos = received.shape[-1]
    bin_ = max(1, -(-k_pos // MAX_BINS))
    padded = torch.nn.functional.pad(received, (0, -(-k_pos // bin_) * bin_ - k_pos))
    binned = padded.view(*received.shape[:2], -1, bin_).sum(-1)
    return AttentionMaps(block, _rounded(blocked), bin_, _rounded(binned))


def _rounded(t: Tensor) -> list:
    """``t`` as nested lists of floats with 4 significant digits (what a figure can show)."""

    def cut(value: list | float) -> list | float:
        return [cut(v) for v in value] if isinstance(value, list) else float(f"{value:.4g}")

    return cut(t.double().tolist())

"""Parameter gradients of an attention module for one upstream gradient, a block of query rows
at a time, so that no autograd graph over every (q_pos, k_pos) weight is ever alive.

The loss of compare's gradient check is <upstream, output>, a sum over query rows; a row's
output depends on its own query and every key, so the gradient is the sum over blocks of rows of
the gradients of <upstream[rows], output[rows]>, each through the module's explicit path (the
trace) with only those rows as queries. A causal mask becomes each block's explicit rows of it.
One block (short inputs) is the whole computation as before, bit for bit; more blocks agree with
it to float32 rounding of the sum.
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.attention.module import MultiHeadAttention

#: Bytes of one (batch, head, rows, k_pos) float32 matrix of a block; its graph holds a few.
BLOCK_BYTES = 16 * 2**20


def block_rows(batch: int, heads: int, q_pos: int, k_pos: int) -> int:
    """Query rows per block: one (batch, head, rows, k_pos) float32 matrix of at most
    ``BLOCK_BYTES`` (at least one row)."""
    return max(1, min(q_pos, BLOCK_BYTES // max(1, 4 * batch * heads * k_pos)))


def row_gradients(
    module: MultiHeadAttention,
    inputs: tuple[Tensor, Tensor | None, Tensor | None],
    masks: dict,
    upstream: Tensor,
) -> dict[str, Tensor]:
    """{parameter name: d<upstream, output>/d parameter} (zeros for a parameter the output does
    not use). inputs: (query, key, value) in the module's layout, key and value defaulting to
    query; masks: ``trace``'s key_padding_mask, attn_mask, is_causal; upstream: (batch, q_pos,
    embed_dim), batch first as the trace's output."""
    query, key, value = inputs
    key = query if key is None else key
    value = key if value is None else value
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    total = {n: torch.zeros_like(p) for n, p in named}
    batch, q_pos = upstream.shape[:2]
    seq = 1 if query.dim() == 3 and module.batch_first else 0  # the query's position dimension
    k_pos = key.shape[seq]
    rows = block_rows(batch, module.num_heads, q_pos, k_pos)
    if masks["is_causal"] and masks["attn_mask"] is not None:
        rows = q_pos  # the mask and the hint together: one block, as the module reads them
    for start in range(0, q_pos, rows):
        stop = min(start + rows, q_pos)
        block = _block_masks(masks, start, stop, q_pos, k_pos)
        # one block: the inputs as given (the module packs W_Q, W_K, W_V when key is query)
        given = inputs if rows == q_pos else (query.narrow(seq, start, stop - start), key, value)
        with torch.enable_grad():
            output = module.trace(*given, **block).output  # (batch, rows, embed_dim)
            grads = torch.autograd.grad(
                output, [p for _, p in named], upstream[:, start:stop], allow_unused=True
            )
        for (name, _), g in zip(named, grads, strict=True):
            if g is not None:
                total[name] += g
    return total


def _block_masks(masks: dict, start: int, stop: int, q_pos: int, k_pos: int) -> dict:
    """The masks of query rows [start, stop): attn_mask's rows, a causal mask as its rows
    (True: may not attend, key j > query i)."""
    if stop - start == q_pos:
        return masks
    attn_mask = masks["attn_mask"]
    if masks["is_causal"]:
        positions = torch.arange(start, stop)[:, None]  # (rows, 1)
        attn_mask = torch.arange(k_pos)[None, :] > positions  # (rows, k_pos)
    elif attn_mask is not None:
        attn_mask = attn_mask[..., start:stop, :]  # (rows, k_pos) or (batch * head, rows, k_pos)
    return {**masks, "attn_mask": attn_mask, "is_causal": False}

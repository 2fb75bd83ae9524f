"""The chunked path of the kernel: query rows a block at a time, the weights never held whole.

``chunked`` is the forward without autograd (weights averaged over heads, streamed statistics,
and what SDPA cannot serve: soft-cap, sinks, head views, windows, lazy masks).
``RecomputedAttention`` gives it a backward that recomputes each block's weights from Q and K
instead of keeping them, as FlashAttention's backward does: a block's scores, weights and
their gradients live only while that block is differentiated, so a backward at 8192 tokens needs
the memory of a few blocks, not of the (batch, head, q_pos, k_pos) weights. Within a block the
math is ``block.block_weights`` and ``block.values`` under autograd: one definition of soft-cap,
sinks, views and masks for both directions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.attention.block import block_weights, values
from headlab.attention.mask_spec import MaskSpec, MergedMask
from headlab.attention.streaming_sums import ChunkSums, StreamingSums
from headlab.attention.workers import run_blocks, usable

# Blocks of the chunked path. For weights averaged over heads: one batch element's heads over
# ``rows`` query rows, about BLOCK_ELEMENTS weights (4 MiB in float32: on 2 idle cores, 2^19 to
# 2^21 were 3 to 15% faster than 1 MiB at batch 8 x 256 and 1 x 2048 in three interleaved runs;
# beside a competing process the size made no difference), never fewer than MIN_ROWS rows (BLAS
# is slow on thinner matrices: 16 rows cost 10x more than 64 at seq 2048).
BLOCK_ELEMENTS = 2**20
MIN_ROWS = 64
# Causal rows read no key after their own: without averaging, a call whose rows fit one chunk is
# still cut into up to CAUSAL_BLOCKS blocks (of MIN_ROWS rows at least), so that the first
# blocks skip the later keys: 4 blocks do 10/16 of the scores, softmax, values and statistics
# of one (SmolLM2's statistics at 256 tokens, one thread: 1.04x TransformerLens' CPU time with
# one block, measured side by side).
CAUSAL_BLOCKS = 4


Job = tuple[slice, slice]  # (batch elements, query rows)


def plan(
    q: Tensor,
    k: Tensor,
    view: int | None,
    *,
    mean: bool,
    chunk_elements: int,
    workers: int,
    causal: bool = False,
) -> tuple[list[Job], bool]:
    """The blocks of one call, and whether K and V are worth a contiguous copy first.

    Averaging: one batch element per block, about BLOCK_ELEMENTS weights, at least MIN_ROWS
    rows. Otherwise the whole batch per block, ``chunk_elements`` weights in all the blocks
    in flight (one per worker) at once, and at least CAUSAL_BLOCKS blocks of MIN_ROWS rows or
    more where ``causal`` rows skip the keys after them."""
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    out_heads = heads if view is None else view
    if mean:
        batch_step = 1
        rows_step = min(q_len, max(MIN_ROWS, BLOCK_ELEMENTS // max(1, out_heads * k_len)))
    else:  # the whole batch (also an empty one); a worker's chunks share chunk_elements
        batch_step = max(1, batch)
        rows_step = max(1, chunk_elements // max(1, workers * batch * out_heads * k_len))
        if causal:
            rows_step = min(rows_step, max(MIN_ROWS, -(-q_len // CAUSAL_BLOCKS)))
    jobs = [
        (slice(b0, min(b0 + batch_step, batch)), slice(start, min(start + rows_step, q_len)))
        for b0 in range(0, batch, batch_step)
        for start in range(0, q_len, rows_step)
    ]
    # One copy where it pays: a strided batch of heads would be copied by every block's matmul,
    # and keys read by several blocks of rows are read faster contiguous (split heads are
    # strided views). Read by one block each (batch 8 x 256), the copy is all cost: 2% of the
    # call, measured side by side (81 rounds, faster in 57 to 65).
    return jobs, batch_step > 1 or rows_step < q_len


def visible_keys(mask: MaskSpec | None, rows: slice, k_len: int) -> int:
    """How many of ``k_len`` keys the block of ``rows`` reads: causal rows see no key after
    their own position (with extra key columns, appended last, it reads every key)."""
    if mask is None or mask.extra_keys:
        return k_len
    return mask.last_key(rows.stop, k_len)


def block_mask(
    mask: MaskSpec | None, rows: slice, keys: int, part: slice, like: Tensor, *, trim: bool
) -> MergedMask | None:
    """The mask of one block: rows ``rows`` of batch elements ``part`` over ``keys`` keys
    (``trim``: a causal-only mask covers the keys from the first row's on, for the in-place
    scores of the forward, ``MergedMask.first``)."""
    if mask is None:
        return None
    merged = mask.block(
        rows.start, rows.stop, keys, dtype=like.dtype, device=like.device, trim=trim
    )
    return batch_part(merged, part)


def chunked(
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
    at a time. Averaging: one batch element per block, sized for the cache; otherwise the whole
    batch per chunk, ``chunk_elements`` weights in all the chunks in flight at once. Causal rows
    skip the keys after them. On CPU the blocks go to ``workers.run_blocks``, each one's
    statistics (``StreamingSums.chunk``) merged in order in this thread."""
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    extra = 0 if mask is None else mask.extra_keys
    # head_out is written position-major, (batch, q_pos, head, d), and returned as its
    # (batch, head, q_pos, d) view: merging the heads for W_O is then free.
    out = q.new_empty(batch, q_len, heads, v.shape[-1])
    averaged = q.new_empty(batch, q_len, k_len) if mean else None
    on_workers = usable() if q.device.type == "cpu" else 1
    trims = mask is not None and mask.last_key(1, k_len) < k_len  # causal rows skip keys
    jobs, copy = plan(
        q, k, view, mean=mean, chunk_elements=chunk_elements, workers=on_workers, causal=trims
    )
    if copy:
        k, v = k.contiguous(), v.contiguous()

    def block(job: tuple[slice, slice]) -> ChunkSums | None:
        part, rows = job
        keys = visible_keys(mask, rows, k_len)
        merged = block_mask(mask, rows, keys, part, q, trim=True)
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
        o = values(p, v[part, :, :keys], heads)  # (batch', head, rows, d)
        out[part, rows] = o.transpose(1, 2)
        if averaged is not None:
            averaged[part, rows, keys:] = 0.0
            torch.mean(p, dim=1, out=averaged[part, rows, :keys])
        if sums is None:
            return None
        causal = mask is not None and mask.causal and not extra
        return sums.chunk(p, rows, causal_keys=causal, outputs=o, values=v[part, :, :keys])

    merge = None if sums is None else sums.merge  # the sums add up chunk by chunk, in order
    run_blocks(jobs, block, merge, on_workers)  # on the workers on CPU, else in order here
    return out.transpose(1, 2), averaged


def batch_part(merged: MergedMask | None, part: slice) -> MergedMask | None:
    """The batch elements ``part`` of a block (a broadcast batch dimension stays)."""
    if merged is None:
        return None

    def cut(t: Tensor | None) -> Tensor | None:
        return t if t is None or t.shape[0] == 1 else t[part]

    return MergedMask(cut(merged.additive), cut(merged.keep), merged.first)


class RecomputedAttention(torch.autograd.Function):
    """head_out (batch, head, q_pos, d_value) of ``chunked``, with a backward that recomputes
    each block's weights (see the module docstring). Inputs: q (batch, head, q_pos, d_head),
    k (batch, kv_head, k_pos, d_head), v (batch, kv_head, k_pos, d_value), sinks (head,) or
    None; the mask, scale, soft-cap, view and block size are constants (a mask whose tensors
    need gradients takes the explicit path)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, mask, scale, softcap, view, chunk_elements):
        out, _ = chunked(
            q,
            k,
            v,
            mask,
            scale=scale,
            softcap=softcap,
            sinks=sinks,
            view=view,
            mean=False,
            sums=None,
            chunk_elements=chunk_elements,
        )
        ctx.save_for_backward(q, k, v, sinks)
        ctx.constants = (mask, scale, softcap, view, chunk_elements)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, sinks = ctx.saved_tensors
        mask, scale, softcap, view, chunk_elements = ctx.constants
        heads, k_len = q.shape[1], k.shape[2]
        d_q, d_k, d_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        want_sinks = sinks is not None and ctx.needs_input_grad[3]
        d_sinks = torch.zeros_like(sinks) if want_sinks else None
        jobs, _ = plan(q, k, view, mean=False, chunk_elements=chunk_elements, workers=1)
        for part, rows in jobs:
            keys = visible_keys(mask, rows, k_len)
            merged = block_mask(mask, rows, keys, part, q, trim=False)
            inputs = [
                q[part, :, rows].detach().requires_grad_(),
                k[part, :, :keys].detach().requires_grad_(),
                v[part, :, :keys].detach().requires_grad_(),
            ]  # (batch', head, rows, d), (batch', kv_head, keys, d) twice
            block_sinks = None
            if sinks is not None:
                block_sinks = sinks.detach().requires_grad_(want_sinks)
                if want_sinks:
                    inputs.append(block_sinks)
            with torch.enable_grad():
                _, p = block_weights(
                    inputs[0],
                    inputs[1],
                    merged,
                    scale=scale,
                    softcap=softcap,
                    sinks=block_sinks,
                    view=view,
                )
                o = values(p, inputs[2], heads)  # (batch', head, rows, d_value)
                grads = torch.autograd.grad(o, inputs, d_out[part, :, rows])
            d_q[part, :, rows] += grads[0]
            d_k[part, :, :keys] += grads[1]
            d_v[part, :, :keys] += grads[2]
            if want_sinks:
                d_sinks += grads[3]
        return d_q, d_k, d_v, d_sinks, None, None, None, None, None

"""PROVISIONAL: a stand-in for ``headlab.attention.kernel`` (issue 21) until it lands on main.

Everything here follows the kernel contract (``MaskSpec``, ``attend``, ``Attended``: same names,
fields, shapes and conventions) so that replacing this file by the two imports

    from headlab.attention.kernel import Attended, attend
    from headlab.attention.mask_spec import MaskSpec

changes nothing else in ``models/hf``. It is the plain eager math, in blocks of query rows:

    scores = scale * q k^T                      (batch, kv_head, group, rows, k_pos)
    scores = cap * tanh(scores / cap)           (soft-cap, before the mask: Gemma 2)
    scores[hidden] = -inf                       (the mask, built block by block)
    weights = softmax([scores, sink])[:-1]      (a sink column with no value: gpt-oss)
    head_out = weights v

Grouped K/V heads are grouped, never repeated: query head h uses K/V head h // group. A query
row that sees no key gets zero weights and a zero output. Not here (the real kernel's job):
``sites``, ``statistics``, the fused SDPA fast path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

BLOCK_ROWS = 256  # query rows per block: the scores held at once are (batch, head, 256, k_pos)


@dataclass(frozen=True)
class MaskSpec:
    """Which keys each query may see (the contract's fields). Convention (torch's
    MultiheadAttention): bool True = may NOT attend. Every given field hides keys; a key is
    visible only when no field hides it."""

    causal: bool = False
    q_offset: int = 0  # query row i sits at key position q_offset + i
    key_padding: Tensor | None = None  # (batch, k_pos) bool, True = padding
    attn_mask: Tensor | None = None  # (b|1, h|1, q_pos, k_pos) bool (True hidden) or float (added)
    window: int | None = None  # with causal: row at p sees p - window < j <= p
    window_sinks: int = 0
    window_heads: Tensor | None = None
    rows: Callable[[int, int], Tensor | None] | None = None  # (start, stop) -> bool hidden block
    bias: Tensor | None = None  # float (b|1, h|1, q_pos|1, k_pos) added
    extra_keys: int = 0


@dataclass(frozen=True)
class Attended:
    """The kernel's result (the contract's fields)."""

    head_out: Tensor  # (batch, head, q_pos, d_value)
    weights: Tensor | None  # as need_weights asked
    scores: Tensor | None
    sums: object | None


def _unsupported(mask: MaskSpec | None) -> None:
    if mask is None:
        return
    if mask.window_sinks or mask.window_heads is not None or mask.extra_keys:
        raise NotImplementedError(
            "the provisional kernel supports causal, q_offset, key_padding, attn_mask, window, "
            "rows and bias; got window_sinks, window_heads or extra_keys"
        )


def _hidden_and_added(
    mask: MaskSpec | None, start: int, stop: int, k_len: int, device: torch.device
) -> tuple[Tensor | None, Tensor | None]:
    """For query rows start..stop-1: (hidden bool (b|1, h|1, rows, k_pos) or None,
    added float (b|1, h|1, rows|1, k_pos) or None)."""
    if mask is None:
        return None, None
    hidden = None

    def hide(block: Tensor) -> None:
        nonlocal hidden
        hidden = block if hidden is None else hidden | block

    if mask.causal or mask.window is not None:
        position = torch.arange(start, stop, device=device)[:, None] + mask.q_offset  # (rows, 1)
        key = torch.arange(k_len, device=device)[None, :]  # (1, k_pos)
        if mask.causal:
            hide((key > position)[None, None])
        if mask.window is not None:
            hide((key <= position - mask.window)[None, None])
    if mask.key_padding is not None:
        hide(mask.key_padding[:, None, None, :])
    if mask.rows is not None:
        block = mask.rows(start, stop)
        if block is not None:
            hide(block)
    added = None
    if mask.attn_mask is not None:
        rows = mask.attn_mask[..., start:stop, :]
        if rows.dtype == torch.bool:
            hide(rows)
        else:
            added = rows
    if mask.bias is not None:
        bias = mask.bias if mask.bias.shape[-2] == 1 else mask.bias[..., start:stop, :]
        added = bias if added is None else added + bias
    return hidden, added


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
    sites: object | None = None,
    statistics: object | None = None,
) -> Attended:
    """Attention of q (batch, head, q_pos, d_head) over k (batch, kv_head, k_pos, d_head) and
    v (batch, kv_head, k_pos, d_value); head % kv_head == 0. See the module docstring."""
    if sites is not None or statistics is not None:
        raise NotImplementedError("the provisional kernel has no sites or statistics")
    if need_weights not in (None, "heads", "mean"):
        raise ValueError(f"need_weights must be None, 'heads' or 'mean', got {need_weights!r}")
    _unsupported(mask)
    batch, heads, q_len, d_head = q.shape
    kv_heads, k_len = k.shape[1], k.shape[2]
    if k.shape[0] != batch or heads % kv_heads or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"expected q (batch, head, q_pos, d), k and v (batch, kv_head, k_pos, d) with head "
            f"a multiple of kv_head; got q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}"
        )
    group = heads // kv_heads
    scale = d_head**-0.5 if scale is None else scale
    qg = q.reshape(batch, kv_heads, group, q_len, d_head)  # (batch, kv_head, group, q_pos, d)
    kt = k[:, :, None].transpose(-1, -2).float()  # (batch, kv_head, 1, d, k_pos)
    vf = v[:, :, None].float()  # (batch, kv_head, 1, k_pos, d_value)
    sink = None if sinks is None else sinks.float().reshape(1, kv_heads, group, 1, 1)
    outputs, weight_blocks = [], []
    for start in range(0, q_len, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, q_len)
        scores = (qg[..., start:stop, :].float() @ kt) * scale  # (batch, kv, group, rows, k_pos)
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        hidden, added = _hidden_and_added(mask, start, stop, k_len, q.device)
        scores = scores.reshape(batch, heads, stop - start, k_len)  # (batch, head, rows, k_pos)
        if added is not None:
            scores = scores + added.float()
        if hidden is not None:
            scores = scores.masked_fill(hidden, float("-inf"))
        scores = scores.reshape(batch, kv_heads, group, stop - start, k_len)
        top = scores.amax(-1, keepdim=True)  # (batch, kv, group, rows, 1)
        if sink is not None:
            top = torch.maximum(top, sink.expand_as(top))
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        exp = torch.exp(scores - top)
        total = exp.sum(-1, keepdim=True)
        if sink is not None:
            total = total + torch.exp(sink - top)
        weights = torch.where(total > 0, exp / total.clamp_min(1e-38), torch.zeros_like(exp))
        if dropout_p > 0:
            weights = torch.nn.functional.dropout(weights, p=dropout_p)
        outputs.append(weights @ vf)  # (batch, kv, group, rows, d_value)
        if need_weights is not None:
            weight_blocks.append(weights.reshape(batch, heads, stop - start, k_len))
    head_out = torch.cat(outputs, dim=-2).reshape(batch, heads, q_len, v.shape[-1]).to(v.dtype)
    weights = None
    if need_weights is not None:
        weights = torch.cat(weight_blocks, dim=-2).to(v.dtype)  # (batch, head, q_pos, k_pos)
        if need_weights == "mean":
            weights = weights.mean(1)
    return Attended(head_out=head_out, weights=weights, scores=None, sums=None)

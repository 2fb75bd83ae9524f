"""Which keys each query may see, described once and built block by block: ``MaskSpec``.

Every mask headlab knows is one ``MaskSpec``: causality, key padding, torch's ``attn_mask``
(boolean or additive), a sliding window (for every head, or only some, with sink keys that stay
visible), a lazy mask built by someone else (transformers' mask functions), an additive per-head
bias (ALiBi, T5) and the always-visible key columns of ``add_bias_kv`` / ``add_zero_attn``. The
kernel asks it for the rows it is working on (``block``), so that a (q_pos, k_pos) mask exists
only where a path holds the whole score matrix anyway.

Convention (torch.nn.MultiheadAttention's): in a boolean mask True means *may not attend*. A
block comes back as a ``MergedMask``: one additive float mask, -inf where hidden, and ``keep``,
which is 0 on the rows that see no key at all: those rows get zero weights and a zero output
(torch gives NaN there). This is the one place that decides causality and fully masked rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.attention.layout import static_graph
from headlab.attention.sites import KeyBudget


@dataclass(frozen=True)
class MergedMask:
    """One block of a mask, ready to add to the scores.

    additive: ``(batch|1, head|1, rows, k_pos)`` float, -inf where attention is forbidden; rows
        that were fully masked are set to 0 so that softmax stays finite.
    keep: ``(batch|1, head|1, rows, 1)`` float, 0 on fully masked rows, 1 elsewhere; ``None``
        when no row is fully masked.
    first: the key column ``additive`` starts at (it covers columns first .. k_pos - 1; the
        ones before are 0): a causal block of rows hides nothing before its first row's key.
    """

    additive: Tensor
    keep: Tensor | None
    first: int = 0

    def add_to(self, scores: Tensor) -> Tensor:
        """scores (.., rows, k_pos) + the mask, in place."""
        if self.first:
            scores[..., self.first :] += self.additive
            return scores
        return scores.add_(self.additive)


@dataclass(frozen=True)
class MaskSpec:
    """The keys each query row may see (see the module docstring). Shapes name ``k_pos`` the
    real keys, without the ``extra_keys`` columns appended after them.

    causal: row i (at key position q_offset + i) sees keys j <= q_offset + i.
    q_offset: the key position of query row 0 (decoding with a cache: past keys).
    key_padding: (batch, k_pos) bool, True on keys no query may see.
    attn_mask: (b|1, h|1, q_pos, k_pos) bool (True hidden) or float (added to the scores).
    window, window_sinks, window_heads: a sliding window of ``window`` keys: a causal row at p
        sees p - window < j <= p, a non-causal one |p - j| < window; the first ``window_sinks``
        keys stay visible; only the query heads where ``window_heads`` (head,) is True (all when
        None) are windowed.
    rows: a lazy mask: rows(start, stop) -> bool (b|1, h|1, stop - start, k_pos), True hidden,
        for query rows start .. stop - 1, or None where it hides nothing.
    bias: (b|1, h|1, q_pos|1, k_pos) float added to the scores (ALiBi, T5's position bias).
    extra_keys: key columns after the real keys that every query sees.
    budget: a ``KeyBudget`` on top of everything else (a KV-cache plan): its heads see only its
        sink keys and its window, whatever window the model has of its own.
    """

    causal: bool = False
    q_offset: int = 0
    key_padding: Tensor | None = None
    attn_mask: Tensor | None = None
    window: int | None = None
    window_sinks: int = 0
    window_heads: Tensor | None = None
    rows: Callable[[int, int], Tensor | None] | None = None
    bias: Tensor | None = None
    extra_keys: int = 0
    budget: KeyBudget | None = None

    @property
    def plain_causal(self) -> bool:
        """Causal and nothing else, queries and keys aligned: SDPA's ``is_causal`` computes it."""
        return (
            self.causal
            and self.q_offset == 0
            and self.window is None
            and self.key_padding is None
            and self.attn_mask is None
            and self.rows is None
            and self.bias is None
            and not self.extra_keys
            and self.budget is None
        )

    @property
    def only_causal(self) -> bool:
        """Causality is all that hides keys (extra key columns allowed)."""
        return self.causal and self._nothing_else

    @property
    def empty(self) -> bool:
        """Nothing is hidden and nothing added."""
        return not self.causal and self._nothing_else

    @property
    def _nothing_else(self) -> bool:
        return (
            self.window is None
            and self.key_padding is None
            and self.budget is None
            and (self.attn_mask is None and self.rows is None and self.bias is None)
        )

    @property
    def large(self) -> bool:
        """Whether a whole (q_pos, k_pos) block of this mask may differ per head or per row in
        ways SDPA cannot be told cheaply (windows, budgets, lazy masks)."""
        return self.window is not None or self.budget is not None or self.rows is not None

    def last_key(self, stop: int, k_len: int) -> int:
        """How many real keys rows before ``stop`` can see at most: causal rows see no key after
        their own position (the rest have zero weight, so a block may skip them)."""
        if self.causal and self.attn_mask is None:
            return min(k_len, self.q_offset + stop)
        return k_len

    def hidden(
        self, start: int, stop: int, k_len: int, device: torch.device, first: int = 0
    ) -> tuple[Tensor | None, Tensor | None]:
        """(bool (b|1, h|1, rows, keys) True where hidden, float additions (b|1, h|1, rows|1,
        keys)) of query rows start .. stop - 1 over real keys first .. k_len - 1; either may be
        None."""
        hidden: Tensor | None = None
        added: Tensor | None = None

        def hide(part: Tensor | None) -> None:
            nonlocal hidden
            if part is not None:
                hidden = part if hidden is None else hidden | part

        positions = torch.arange(start, stop, device=device) + self.q_offset  # (rows,)
        keys = torch.arange(first, k_len, device=device)  # (keys,)
        columns = slice(first, k_len)
        if self.attn_mask is not None:
            part = _rows_of(self.attn_mask, start, stop)[..., columns]
            if part.dtype == torch.bool:
                hide(part)
            else:
                added = part
        if self.causal:
            hide((keys[None, :] > positions[:, None])[None, None])  # (1, 1, rows, keys)
        if self.window is not None:
            hide(
                outside_window(
                    positions,
                    keys,
                    self.window,
                    self.window_sinks,
                    self.window_heads,
                    causal=self.causal,
                )
            )
        if self.budget is not None:
            b = self.budget
            hide(outside_window(positions, keys, b.window, b.sinks, b.heads, causal=self.causal))
        if self.key_padding is not None:
            hide(self.key_padding[:, None, None, columns])
        if self.rows is not None:
            part = self.rows(start, stop)
            hide(None if part is None else part[..., columns])
        if self.bias is not None:
            part = _rows_of(self.bias, start, stop)[..., columns]
            added = part if added is None else added + part
        return hidden, added

    def block(
        self,
        start: int,
        stop: int,
        k_len: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
        trim: bool = False,
    ) -> MergedMask | None:
        """Rows start .. stop - 1 over ``k_len`` keys (``extra_keys`` included, last) as a
        ``MergedMask``; None when nothing is masked. ``trim``: a causal-only mask covers only
        the keys from the first row's position on (``MergedMask.first``)."""
        real = k_len - self.extra_keys
        first = min(real, self.q_offset + start + 1) if trim and self.only_causal else 0
        first = max(first, 0)
        hidden, added = self.hidden(start, stop, real, device, first)
        if hidden is None and added is None:
            return None
        additive = added.to(dtype) if added is not None else None
        if hidden is not None:
            if additive is None:
                additive = torch.zeros(hidden.shape, dtype=dtype, device=device)
            else:
                shape = torch.broadcast_shapes(additive.shape, hidden.shape)
                additive = additive.expand(shape)
            additive = additive.masked_fill(hidden, float("-inf"))
        if self.extra_keys:
            additive = F.pad(additive, (0, self.extra_keys))
        dead = (additive == float("-inf")).all(dim=-1, keepdim=True)  # (b|1, h|1, rows, 1)
        # Eagerly, skip ``keep`` when no row is dead (the common case, one pass less). A recorded
        # graph (jit.trace, export, compile) may not branch on values: it always carries ``keep``.
        if first or (not static_graph() and not bool(dead.any())):
            return MergedMask(additive=additive, keep=None, first=first)
        return MergedMask(additive=additive.masked_fill(dead, 0.0), keep=(~dead).to(dtype))


def outside_window(
    positions: Tensor,
    keys: Tensor,
    window: int,
    sinks: int,
    heads: Tensor | None,
    *,
    causal: bool,
) -> Tensor:
    """(1, head|1, rows, keys) True on keys outside the window (sink keys excepted) of the query
    heads ``heads`` ((head,) bool, None: all)."""
    offset = positions[:, None] - keys[None, :]  # (rows, keys)
    outside = offset >= window if causal else offset.abs() >= window
    if sinks:
        outside = outside & (keys >= sinks)[None, :]
    outside = outside[None, None]
    if heads is not None:
        outside = outside & heads.view(1, -1, 1, 1).to(outside.device)
    return outside


def _rows_of(mask: Tensor, start: int, stop: int) -> Tensor:
    """Rows start .. stop - 1 of a (.., q_pos|1, k_pos) mask (a broadcast row stays)."""
    return mask if mask.shape[-2] == 1 else mask[..., start:stop, :]

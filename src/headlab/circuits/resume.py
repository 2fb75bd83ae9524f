"""Runs of a model that start at a layer, from a residual stream given, through the run protocol.

Path patching changes one layer's input and recomputes everything after it; the layers before
are the clean run's. ``Runner.forward(start, hidden, copies)`` is the model's run
(``models/run_protocol.py``: ``run_blocks``) on ``copies`` copies of the batch stacked on the
batch axis, from block ``start`` with ``hidden`` (copies * batch, pos, d_model) as its residual
stream; with ``start`` = the layer count, ``hidden`` is the last block's output. Only the
metric's positions are unembedded. With ``stop`` (a ``StopAt``) the run ends there and returns
the tensor at that site; ``values`` returns a layer's q, k and v, nothing after them run.

``Runner.cache(ids)`` is one full run that keeps what patching reads: the residual stream
entering each block and leaving the last, each layer's head outputs (before W_O) and MLP output,
and the metric's logits.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.blocks import circuit_blocks
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import RunnableModel, StopAt, cache

#: (text, position) rows whose logits (and log-softmax) ``Runner.measure`` holds at a time
#: (1024 x 49152 x 4 B = 192 MiB each for SmolLM2).
METRIC_ROWS = 1024

Hooks = Callable[[ExitStack], None]


@dataclass
class Cache:
    """One full run. resid: N + 1 tensors (batch, pos, d_model), the stream entering block
    0 .. N-1 and leaving block N-1; head_outputs: per layer (batch, head, pos, d_head); mlp: per
    layer (batch, pos, d_model) or None; logits: (batch, n_kept, vocab) at the kept
    positions (None: a model without an output head, an encoder read by the score split);
    cross: per layer, its cross-attention's head outputs (batch, head, pos, d_head), or None."""

    resid: list[Tensor]
    head_outputs: list[Tensor]
    mlp: list[Tensor | None]
    logits: Tensor | None
    cross: list[Tensor | None] | None = None


def until_values(attention, seen: dict[str, Tensor]) -> Hooks:
    """Interventions that keep a layer's q and k in ``seen`` as the kernel's sites receive them
    (after the family's projections, norms and rotary); the run that stops at v (``values``)
    adds v."""

    def keep(site: str) -> Callable[[Tensor], None]:
        return lambda t: seen.__setitem__(site, t)

    def hooks(stack: ExitStack) -> None:
        for site in ("q", "k"):
            stack.enter_context(intervene(attention, site, keep(site)))

    return hooks


class Runner:
    """Runs of ``model`` on ``ids`` (batch, pos) int64 with ``attention_mask`` (batch, pos)
    (1 on real tokens), unembedding only ``positions`` (n_kept,) int64. ``encoders``: an
    encoder's one stream is taken too (it has no output head: its cache holds no logits)."""

    def __init__(
        self,
        model: RunnableModel,
        ids: Tensor,
        attention_mask: Tensor,
        positions: Tensor,
        encoders: bool = False,
    ) -> None:
        self.model = model
        self.blocks = circuit_blocks(model, encoders)
        self.ids, self.attention_mask, self.positions = ids, attention_mask.long(), positions
        self.input = TokenBatch(ids, attention_mask.bool(), [])

    @property
    def batch(self) -> int:
        return self.ids.shape[0]

    def measure(
        self,
        metric: Callable[[Tensor], Tensor],
        start: int,
        hidden: Tensor,
        copies: int,
        hooks: Hooks | None = None,
    ) -> Tensor:
        """``metric`` (logits (c * batch, n_kept, vocab) -> (c,)) of each copy of ``forward``'s
        run, (copies,), the logits made by the model's own output head a few copies at a time
        (``METRIC_ROWS`` rows) from the final states at the kept positions: the logits of
        every copy never exist at once, so a run can stack many copies."""
        states = self.model.run_blocks(
            self.input,
            start=start,
            hidden=hidden,
            copies=copies,
            keep=self.positions,
            interventions=hooks,
        )
        per = max(1, METRIC_ROWS // (self.batch * states.shape[1]))
        values = []
        for c in range(0, copies, per):
            rows = slice(c * self.batch, min(c + per, copies) * self.batch)
            values.append(metric(self.model.unembed(states[rows])))
        return torch.cat(values)

    def stream_in(self) -> Tensor:
        """(batch, pos, d_model) the residual stream entering block 0 on ``ids`` (the model's
        embeddings, positions included); no block runs."""
        with torch.no_grad():
            return self.model.run_blocks(self.input, stop=StopAt(0, "resid_in")).detach()

    def cache(self, ids: Tensor) -> Cache:
        """One full run of ``ids`` (batch, pos) with everything patching reads kept."""
        run = cache(self.model, TokenBatch(ids, self.input.attention_mask, []), self.positions)
        if not getattr(self.model, "causal", True):  # an encoder: no output head
            return Cache(run.resid, run.head_outputs, run.mlp, None, run.cross_outputs)
        with torch.no_grad():
            logits = self.model.unembed(run.final)
        return Cache(run.resid, run.head_outputs, run.mlp, logits.detach(), run.cross_outputs)

    def forward(
        self,
        start: int,
        hidden: Tensor,
        copies: int,
        hooks: Hooks | None = None,
        rows: slice | None = None,
        stop: StopAt | None = None,
    ) -> Tensor:
        """The logits (copies * batch, n_kept, vocab) of the run described in the module
        docstring, or with ``stop`` the tensor at its site. ``hooks(stack)`` enters the run's
        interventions into ``stack``; they are removed when the run ends.

        ``rows``: run the positions rows.start .. rows.stop - 1 alone (their own position ids,
        ``hidden`` (copies * batch, rows, d_model)), for the maps that act on each position
        alone (a block's norm and projections up to q, k, v; its MLP with the heads held): only
        with a ``stop`` before anything that mixes positions."""
        if rows is not None and stop is None:
            raise ValueError("a run of some positions alone needs a stop")
        out = self.model.run_blocks(
            self.input,
            start=start,
            hidden=hidden,
            copies=copies,
            stop=stop,
            rows=rows,
            interventions=hooks,
            keep=None if stop else self.positions,
        )
        return out if stop is not None else self.model.unembed(out)

    def values(
        self,
        layer: int,
        hidden: Tensor,
        copies: int,
        hooks: Hooks | None = None,
        rows: slice | None = None,
    ) -> dict[str, Tensor]:
        """Layer ``layer``'s q, k and v (as the kernel's sites receive them) on a run from that
        layer with ``hidden``; nothing after the layer's v runs."""
        seen: dict[str, Tensor] = {}
        keep = until_values(self.blocks[layer].attention, seen)

        def both(stack: ExitStack) -> None:
            if hooks is not None:
                hooks(stack)
            keep(stack)

        seen["v"] = self.forward(layer, hidden, copies, both, rows, StopAt(layer, "v"))
        return seen


__all__ = ["Cache", "Runner", "until_values"]

"""The run protocol (``models/run_protocol.py``) for every family of the transformers route.

A run is the family's own forward (embeddings, masks, rotary tables, final norm: the family's
code), called on its body (``model.<base_model_prefix>``) with ``copies`` copies of the batch
stacked on the batch axis. Starting at block ``start``: the blocks before it return their input
(their ``forward`` stands in for one call, nothing computed) and block ``start`` receives the
given stream at its resid_in. Stopping: the run ends at the stop's site (``stopped_run``). The
blocks and their sites come from ``block_parts.py``; logits from the model's own output head
(``block_logits.HFOutputRows``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager

import torch
from torch import Tensor, nn

from headlab.models.hf.block_logits import HFOutputRows
from headlab.models.hf.block_parts import HFBlockParts, hf_blocks
from headlab.models.hf.rotary_tables import rotary_tables
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import (
    Block,
    Interventions,
    StopAt,
    Stream,
    check_start,
    given_stream,
    stopped_run,
)

#: Families whose first block makes what every later block reads (T5's relative position bias,
#: handed on from block to block): the blocks before ``start`` run, on the real input, and
#: block ``start``'s resid_in is then replaced.
HANDED_ON = frozenset({"t5", "mt5", "umt5"})


@contextmanager
def skipped_blocks(parts: Sequence[HFBlockParts]) -> Iterator[None]:
    """Within the block, ``parts``' blocks return their input (no compute)."""

    def passes(h, *_args, **_kwargs):
        return h

    for part in parts:
        part.module.forward = passes
    try:
        yield
    finally:
        for part in parts:
            del part.module.forward


class BlockRoute:
    """The protocol's methods of ``TransformersModel`` (it holds ``model``, ``layers``,
    ``name``, ``causal``)."""

    model: nn.Module
    name: str
    causal: bool

    def _block_parts(self) -> tuple[list[Block], list[HFBlockParts]]:
        found = self.__dict__.get("_blocks_read")
        if found is None:
            found = hf_blocks(self.name, self.model, self.layers, self.causal)
            self.__dict__["_blocks_read"] = found
        return found

    def streams(self) -> list[Stream]:
        return [Stream("decoder" if self.causal else "encoder", "text")]

    def blocks(self) -> list[Block]:
        return self._block_parts()[0]

    def run_blocks(
        self,
        batch: TokenBatch,
        *,
        start: int = 0,
        hidden: Tensor | None = None,
        copies: int = 1,
        stop: StopAt | None = None,
        rows: slice | None = None,
        keep: Tensor | None = None,
        interventions: Interventions | None = None,
        sources: Mapping[str, Tensor] | None = None,
    ) -> Tensor:
        blocks, parts = self._block_parts()
        check_start(blocks, start, hidden)
        if sources:
            raise ValueError(f"{self.name} has one stream: no sources to read")
        device = next(self.model.parameters()).device
        ids, mask = batch.input_ids, batch.attention_mask.long()
        kwargs = {}
        body = getattr(self.model, self.model.base_model_prefix, self.model)
        if rows is not None:  # positions rows.start .. rows.stop - 1 alone, at their positions
            ids, mask = ids[:, rows], mask[:, rows]
            position = torch.arange(rows.start, rows.start + ids.shape[1], device=device)
            # (T5's stack takes none: its positions are its relative bias, not a per-position map)
            if "position_ids" in inspect.signature(body.forward).parameters:
                kwargs["position_ids"] = position[None].expand(ids.shape[0] * copies, -1)
        family = getattr(self.model.config, "model_type", "")

        def call() -> Tensor:
            out = body(
                input_ids=ids.repeat(copies, 1).to(device),
                attention_mask=mask.repeat(copies, 1).to(device),
                use_cache=False,
                **kwargs,
            )
            states = out.last_hidden_state  # (copies * batch, pos, d_model)
            return states if keep is None else states[:, keep.to(device)]

        with ExitStack() as stack:
            stack.enter_context(skipped_blocks([] if family in HANDED_ON else parts[:start]))
            given_stream(blocks, start, hidden)(stack)
            if interventions is not None:
                interventions(stack)
            return stopped_run(blocks, stop, call)

    def rotary_tables(self, positions: Tensor, head_dim: int):
        """(cos, sin, rotate_half) of the family's rotary positions (rotary_tables.py)."""
        return rotary_tables(self.name, self.model, positions, head_dim)

    def unembed(self, states: Tensor) -> Tensor:
        if not self.causal:
            raise ValueError(f"{self.name} is not a language model: it has no output head")
        return HFOutputRows(self.model, states).logits(slice(None))


__all__ = ["BlockRoute", "skipped_blocks"]

"""An encoder-decoder's decoder stream as a one-stream runnable model, for one source held fixed.

The score split (circuits/score_sides.py) reads one residual stream. ``DecoderStream(model,
source)`` offers the run protocol (``models/run_protocol.py``) over the decoder's blocks alone,
numbered from 0, each with its self-attention and its cross-attention (``Block.reads`` =
"encoder"). Every run reads the encoder's final states for ``source``, computed once: the
decoder's blocks run with the encoder's output stood in for (``sources``), so the encoder never
runs again. A run of some positions alone (``rows``) runs those target tokens alone, which is
exact up to the q, k and v sites for families whose positions enter only as a score bias (T5's
relative bias): ``ROW_FAMILIES``; another family's absolute positions would shift, and it is
refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import Tensor

from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import Block, Interventions, StopAt, Stream, cache

#: Families whose decoder positions enter only as a bias on the scores (T5's relative bias).
ROW_FAMILIES = frozenset({"t5", "mt5", "umt5"})


class DecoderStream:
    """The decoder stream of ``model`` (an ``EncoderDecoderModel``) reading ``source`` (its
    ``SourceBatch``): ``streams``, ``blocks``, ``run_blocks``, ``unembed`` of the protocol."""

    def __init__(self, model, source) -> None:
        self.seq2seq, self.source = model, source
        self.name = f"{model.name} (decoder)"
        self.causal = True
        self.model, self.config = model.model, model.config
        self.layers = model.attention_layers("decoder")
        blocks = model.blocks()
        self.first = model.encoder_blocks()
        self._blocks = [replace(b, index=i) for i, b in enumerate(blocks[self.first :])]
        target = TokenBatch(torch.zeros(source.mask.shape[0], 1, dtype=torch.long), None, [])
        target = TokenBatch(target.input_ids, torch.ones_like(target.input_ids).bool(), [])
        kept = cache(model, {"encoder": source, "decoder": target})
        self.encoded = kept.streams_out["encoder"]  # (batch, source pos, d_model)

    @property
    def output_width(self) -> int:
        return self.seq2seq.output_width

    def streams(self) -> list[Stream]:
        return [Stream("decoder", "text")]

    def blocks(self) -> list[Block]:
        return self._blocks

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
        if sources:
            raise ValueError(f"{self.name} reads its own encoder states: no sources to give")
        if rows is not None:
            family = str(getattr(self.config, "model_type", ""))
            if family not in ROW_FAMILIES:
                raise ValueError(
                    f"{self.name}: a run of some target positions alone shifts the "
                    f"positions of family {family!r} (only {', '.join(sorted(ROW_FAMILIES))})"
                )
            batch = TokenBatch(batch.input_ids[:, rows], batch.attention_mask[:, rows], [])
        if stop is not None:
            stop = StopAt(stop.block + self.first, stop.site, stop.cross)
        return self.seq2seq.run_blocks(
            {"encoder": self.source, "decoder": batch},
            start=start + self.first,
            hidden=hidden if hidden is not None else self._embedded(batch, copies),
            copies=copies,
            stop=stop,
            keep=keep,
            interventions=interventions,
            sources={"encoder": self.encoded},
        )

    def _embedded(self, batch: TokenBatch, copies: int) -> Tensor:
        """(copies * batch, pos, d_model) the stream entering the decoder's first block."""
        with torch.no_grad():
            out = self.seq2seq.run_blocks(
                {"encoder": self.source, "decoder": batch}, stop=StopAt(self.first, "resid_in")
            )
        return out.repeat(copies, *([1] * (out.dim() - 1)))

    def unembed(self, states: Tensor) -> Tensor:
        return self.seq2seq.unembed(states)


__all__ = ["ROW_FAMILIES", "DecoderStream"]

"""An encoder-decoder's two streams, each as a one-stream runnable model, for one source held fixed.

The score split (circuits/score_sides.py) reads one residual stream. ``DecoderStream(model,
source)`` offers the run protocol (``models/run_protocol.py``) over the decoder's blocks alone,
numbered from 0, each with its self-attention and its cross-attention (``Block.reads`` =
"encoder"). Every run reads the encoder's final states for ``source``, computed once: the
decoder's blocks run with the encoder's output stood in for (``sources``), so the encoder never
runs again; a run may give other states for it (``sources["encoder"]``: one per copy), which the
encoder's final norm then reads. ``EncoderStream(model, source)`` offers the encoder's blocks
alone, numbered from 0: a run of the encoder on ``source`` (the batch it is handed stands for
nothing but its rows), ending in the encoder's final states.

A run of some positions alone (``rows``) runs those tokens alone. That is exact for the maps
that act on each position alone (up to the q, k and v sites; a block with its heads held) where
a family's positions enter only as a score bias (T5's relative bias), or only with the
embeddings, before the first block, when the run starts from a given stream (BART, Marian,
Whisper's absolute positions): ``ROW_FAMILIES``; another family is refused in one line. Whisper's
encoder reads whole windows of audio: a run of some rows runs the window, and the stream given to
its first block stands in for those rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace

import torch
from torch import Tensor

from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import (
    Block,
    Interventions,
    StopAt,
    Stream,
    cache,
    check_start,
    given_stream,
    stopped_run,
)

#: Families whose positions enter only as a bias on the scores (T5's relative bias).
BIAS_FAMILIES = frozenset({"t5", "mt5", "umt5"})
#: Families whose positions enter only with the embeddings (learned absolute positions): a run
#: of some rows from a given stream is exact.
EMBEDDED_FAMILIES = frozenset({"bart", "marian", "whisper"})
ROW_FAMILIES = BIAS_FAMILIES | EMBEDDED_FAMILIES


def _rows_checked(name: str, config, rows: slice | None, hidden: Tensor | None) -> None:
    """ValueError (one line) for a run of some rows that would move the family's positions."""
    if rows is None:
        return
    family = str(getattr(config, "model_type", ""))
    if family in BIAS_FAMILIES or (family in EMBEDDED_FAMILIES and hidden is not None):
        return
    if family in EMBEDDED_FAMILIES:
        raise ValueError(f"{name}: a run of some positions of family {family!r} needs its stream")
    raise ValueError(
        f"{name}: a run of some positions alone shifts the positions of family {family!r} "
        f"(only {', '.join(sorted(ROW_FAMILIES))})"
    )


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
        if sources and set(sources) != {"encoder"}:
            raise ValueError(f"{self.name} reads the encoder's states only, got {sorted(sources)}")
        _rows_checked(self.name, self.config, rows, hidden)
        if rows is not None:
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
            sources=sources or {"encoder": self.encoded},
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


class EncoderStream:
    """The encoder stream of ``model`` (an ``EncoderDecoderModel``) reading ``source`` (its
    ``SourceBatch``, one text or one audio window): ``streams``, ``blocks``, ``run_blocks``
    of the protocol; ``final_norm``: the norm after its last block (None: BART, Marian)."""

    def __init__(self, model, source) -> None:
        self.seq2seq, self.source = model, source
        self.name = f"{model.name} (encoder)"
        self.causal = False
        self.model, self.config = model.model, model.config
        self.layers = model.attention_layers("encoder")
        self.count = model.encoder_blocks()
        self._blocks = list(model.blocks()[: self.count])
        self.final_norm = model.streams()[0].final_norm

    @property
    def output_width(self) -> int:
        return self.seq2seq.output_width

    def ids(self) -> Tensor:
        """(batch, pos) the source's token ids, or position numbers for an audio source."""
        ids = self.source.inputs.get("input_ids")
        if ids is not None:
            return ids
        return torch.arange(self.source.mask.shape[1]).expand(self.source.mask.shape[0], -1)

    def streams(self) -> list[Stream]:
        return [Stream("encoder", self.seq2seq.reads, final_norm=self.final_norm)]

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
            raise ValueError(f"{self.name} reads no other stream: no sources to give")
        check_start(self._blocks, start, hidden)
        inputs = dict(self.source.inputs)
        length = self.source.mask.shape[1]
        if rows is not None and (rows.start, rows.stop) != (0, length):
            _rows_checked(self.name, self.config, rows, hidden)
            if "input_ids" in inputs:  # an audio window is read whole; the given stream
                # then stands in for its rows (Whisper's positions are added before block 0)
                inputs = {k: v[:, rows] for k, v in inputs.items()}
        device = next(self.model.parameters()).device
        encoder = self.model.get_encoder()

        def call() -> Tensor:
            given = {
                k: v.repeat(copies, *([1] * (v.dim() - 1))).to(device) for k, v in inputs.items()
            }
            states = encoder(**given).last_hidden_state  # after the encoder's final norm
            return states if keep is None else states[:, keep.to(device)]

        with ExitStack() as stack:
            given_stream(self._blocks, start, hidden)(stack)
            if interventions is not None:
                interventions(stack)
            return stopped_run(self._blocks, stop, call)

    def unembed(self, states: Tensor) -> Tensor:
        raise ValueError(f"{self.name} has no output head")


__all__ = ["BIAS_FAMILIES", "EMBEDDED_FAMILIES", "ROW_FAMILIES", "DecoderStream", "EncoderStream"]

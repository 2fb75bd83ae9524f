"""The run protocol (``models/run_protocol.py``) for the transformers encoder-decoders: two
streams, "encoder" and "decoder", their blocks from ``seq2seq_blocks.py``.

A run is the family's own code: its encoder (``get_encoder()``: embeddings, T5's relative
position bias, Whisper's convolutions over log-mel frames, the final norm), then its decoder
(``get_decoder()``) with the encoder's final states as ``encoder_hidden_states``, on ``copies``
copies of the batch stacked on the batch axis. ``batch`` is one input per stream:
``{"encoder": SourceBatch, "decoder": TokenBatch}`` (``EncoderDecoderModel.source_*`` and
``target_*``).

Starting at block ``start``, that block's resid_in is the given ``hidden`` (the blocks before it
still run: T5's blocks hand the position bias of the first block to the next, so none is
skipped). A run that starts in the decoder takes ``sources["encoder"]``: the stream leaving the
encoder's last block (before its final norm; ``RunCache.streams_out``), which replaces that
block's output, so that the encoder's own final norm is recomputed on it before the
cross-attention's key and value projections read it (the encoder's blocks then run once, not
once per copy: their output is replaced). ``unembed`` runs the model's own head on
final states (T5's rescaling of tied embeddings, BART's final logits bias, Whisper's proj_out):
the model's forward with its decoder stood in for.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.models.hf.block_logits import FinalStates
from headlab.models.hf.norm_sites import stack_final_norm
from headlab.models.hf.seq2seq_blocks import seq2seq_blocks
from headlab.models.run_protocol import (
    Block,
    Interventions,
    StopAt,
    Stream,
    check_start,
    given_stream,
    stopped_run,
)


def _copies(t: Tensor, copies: int) -> Tensor:
    return t.repeat(copies, *([1] * (t.dim() - 1)))


class Seq2SeqRoute:
    """The protocol's methods of ``EncoderDecoderModel`` (it holds ``model``, ``name``,
    ``layers`` by kind and ``reads``: "text" or "audio")."""

    def blocks(self) -> list[Block]:
        found = self.__dict__.get("_stream_blocks")
        if found is None:
            found = seq2seq_blocks(self.name, self.model, self.layers)
            self.__dict__["_stream_blocks"] = found
        return found[0]

    def streams(self) -> list[Stream]:
        """The encoder's stream (with its final norm, which the cross-attention reads through)
        and the decoder's."""
        self.blocks()
        parts = self.__dict__["_stream_blocks"][1]
        first = self.encoder_blocks()
        found = self.__dict__.get("_final_norm", False)
        if found is False:
            modules = [p.module for p in parts[:first]]
            found = stack_final_norm(self.model.get_encoder(), modules)
            self.__dict__["_final_norm"] = found
        return [Stream("encoder", self.reads, final_norm=found), Stream("decoder", "text")]

    @property
    def output_width(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def encoder_blocks(self) -> int:
        """How many of ``blocks()`` are the encoder's (they come first)."""
        return sum(block.stream == "encoder" for block in self.blocks())

    def run_blocks(
        self,
        batch: Mapping,
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
        blocks = self.blocks()
        check_start(blocks, start, hidden)
        if rows is not None:
            raise ValueError(f"{self.name}: an encoder-decoder runs whole texts only (no rows)")
        if not isinstance(batch, Mapping) or set(batch) != {"encoder", "decoder"}:
            got = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
            raise ValueError(
                f"{self.name} runs one input per stream, encoder and decoder; got {got}"
            )
        first_decoder = self.encoder_blocks()
        memory = None
        if start >= first_decoder:
            if not sources or "encoder" not in sources:
                raise ValueError(
                    f"a run of {self.name} from decoder block {start} needs the "
                    "encoder's states (sources['encoder'])"
                )
            memory = sources["encoder"]
        source, target = batch["encoder"], batch["decoder"]
        device = next(self.model.parameters()).device
        encoder, decoder = self.model.get_encoder(), self.model.get_decoder()
        extra = {}
        if "encoder_attention_mask" in inspect.signature(decoder.forward).parameters:
            extra["encoder_attention_mask"] = _copies(source.mask.long(), copies).to(device)
        if memory is not None and memory.shape[0] != copies * source.mask.shape[0]:
            memory = _copies(memory, copies)  # (copies * batch, source pos, d_model)

        def call() -> Tensor:
            # given the encoder's states, its blocks run once (their output is replaced by the
            # copies' states, which its final norm then reads): not once per copy
            encoded = 1 if memory is not None else copies
            inputs = {k: _copies(v, encoded).to(device) for k, v in source.inputs.items()}
            states = encoder(**inputs).last_hidden_state  # after the encoder's final norm
            out = decoder(
                input_ids=_copies(target.input_ids, copies).to(device),
                attention_mask=_copies(target.attention_mask.long(), copies).to(device),
                encoder_hidden_states=states,
                use_cache=False,
                **extra,
            )
            final = out.last_hidden_state  # (copies * batch, target pos, d_model)
            return final if keep is None else final[:, keep.to(device)]

        with ExitStack() as stack:
            if memory is not None:
                given = memory.to(device)
                stack.enter_context(
                    intervene(blocks[first_decoder - 1], "resid_out", lambda t: given, True)
                )
            given_stream(blocks, start, hidden)(stack)
            if interventions is not None:
                interventions(stack)
            return stopped_run(blocks, stop, call)

    def unembed(self, states: Tensor) -> Tensor:
        """(batch, pos, d_model) decoder final states -> (batch, pos, vocab) logits."""
        decoder = self.model.get_decoder()
        path = next(name for name, m in self.model.named_modules() if m is decoder)
        parent_path, _, attribute = path.rpartition(".")
        parent = self.model.get_submodule(parent_path) if parent_path else self.model
        lead = states.shape[:-2]
        flat = states.reshape(-1, *states.shape[-2:])  # (batch, pos, d_model)
        ids = torch.zeros(flat.shape[:2], dtype=torch.long, device=flat.device)
        dummy = flat[:, :1]  # the encoder's output: read by the decoder alone, stood in for
        setattr(parent, attribute, FinalStates(flat))
        try:
            out = self.model(encoder_outputs=(dummy,), decoder_input_ids=ids, use_cache=False)
        finally:
            setattr(parent, attribute, decoder)
        return out.logits.reshape(*lead, *out.logits.shape[-2:])


__all__ = ["Seq2SeqRoute"]

"""The run protocol (``models/run_protocol.py``) for the transformers image encoders (ViT, DINOv2
with or without registers, CLIP's vision tower): one stream, "patches", over the class token,
the registers and the patches (``vision.TokenLayout``), with no causal mask.

A run is the family's own body (``model.<base_model_prefix>``: ViTModel, Dinov2Model, CLIP's
vision transformer: patch and position embeddings, CLIP's pre-norm, the blocks, the final norm)
on ``copies`` copies of the pixel values stacked on the batch axis; ``batch`` is a
(batch, channel, height, width) tensor of pixel values (``VisionModel.pixels``). Starting at block
``start``, the blocks before it return their input (nothing computed) and block ``start``
receives the given stream at its resid_in, as on the decoders' route (``block_run.py``, whose
skipping this reuses); the blocks are read as there (``block_parts.hf_blocks``). A run given its
stream (``hidden``) computes no embeddings: the body's embeddings module returns zeros of the
stream's shape (its patch convolution on every copy would be wasted), so ``rows`` (some
positions alone, for the maps that act on each position alone, with a ``stop``) runs those
positions' stream alone. The stream's ``embedding_norm`` is the norm between the embeddings and
the first block (CLIP's ``pre_layrnorm``), a ``BlockNorm`` with its "scale" site (role
"embed"); None for ViT and DINOv2.

``unembed`` is the model's readout of an image, one row per image ((batch, 1, output_width)):

- a classification head (``ViTForImageClassification``, ``Dinov2ForImageClassification`` and the
  registers' one): the head's logits, the model's own forward with its body stood in for by the
  final states (ViT's head reads the class token, DINOv2's the class token and the mean of the
  patches: so ``unembed`` takes every position's final state);
- a model without a head: the final state of the class token as the model gives it out (ViT,
  DINOv2: after the final norm; CLIP: through its ``post_layernorm``, its ``pooler_output``,
  what CLIP's projection reads).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import torch
from torch import Tensor, nn

from headlab.models.hf.block_logits import FinalStates
from headlab.models.hf.block_parts import HFBlockParts, hf_blocks
from headlab.models.hf.block_run import skipped_blocks
from headlab.models.hf.norm_sites import embedding_norm
from headlab.models.run_protocol import (
    Block,
    Interventions,
    StopAt,
    Stream,
    check_start,
    given_stream,
    stopped_run,
)

#: The stream of an image encoder and its named positions.
PATCHES = Stream("patches", "patches", ("cls", "register"))
#: The body's attribute that holds a norm between its embeddings and its first block (CLIP).
EMBEDDING_NORM = "pre_layrnorm"


@contextmanager
def _embeddings_skipped(body: nn.Module, like: Tensor | None) -> Iterator[None]:
    """Within the block, the body's embeddings return zeros like ``like`` (copies * batch, pos,
    d_model) without computing anything; ``like`` None: no change."""
    embeddings = getattr(body, "embeddings", None)
    if like is None or embeddings is None:
        yield
        return
    object.__setattr__(embeddings, "forward", lambda *a, **k: torch.zeros_like(like))
    try:
        yield
    finally:
        del embeddings.__dict__["forward"]


class VisionRoute:
    """The protocol's methods of ``VisionModel`` (it holds ``model``, ``body``, ``layers``,
    ``name``, ``check_pixels``)."""

    model: nn.Module
    body: nn.Module
    name: str

    def _block_parts(self) -> tuple[list[Block], list[HFBlockParts]]:
        found = self.__dict__.get("_blocks_read")
        if found is None:
            found = hf_blocks(self.name, self.model, self.layers, False, stream=PATCHES.name)
            self.__dict__["_blocks_read"] = found
        return found

    def streams(self) -> list[Stream]:
        """The stream of patches, with its embedding norm where the body has one (CLIP)."""
        found = self.__dict__.get("_stream")
        if found is None:
            module = getattr(self.body, EMBEDDING_NORM, None)
            norm = embedding_norm(module) if isinstance(module, nn.Module) else None
            found = replace(PATCHES, embedding_norm=norm)
            self.__dict__["_stream"] = found
        return [found]

    def blocks(self) -> list[Block]:
        return self._block_parts()[0]

    @property
    def has_head(self) -> bool:
        """Whether the model has an output head on its body (a classifier)."""
        return self.body is not self.model

    @property
    def output_width(self) -> int:
        if self.has_head:
            return int(self.model.config.num_labels)
        return int(self.model.config.hidden_size)

    def run_blocks(
        self,
        batch: Tensor,
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
        if rows is not None and (hidden is None or stop is None or not isinstance(rows, slice)):
            raise ValueError(
                f"{self.name}: a run of some positions alone (a slice) needs their stream "
                "(hidden) and a stop"
            )
        if sources:
            raise ValueError(f"{self.name} has one stream: no sources to read")
        if not isinstance(batch, Tensor):
            raise ValueError(
                f"{self.name} runs pixel values (batch, channel, height, width), got "
                f"{type(batch).__name__}"
            )
        device = next(self.model.parameters()).device
        pixels = self.check_pixels(batch).to(device)
        if hidden is None:  # else the embeddings are not computed (module docstring)
            pixels = pixels.repeat(copies, 1, 1, 1)

        def call() -> Tensor:
            states = self.body(pixel_values=pixels).last_hidden_state  # (copies*batch, pos, d)
            return states if keep is None else states[:, keep.to(device)]

        with ExitStack() as stack:
            stack.enter_context(_embeddings_skipped(self.body, hidden))
            stack.enter_context(skipped_blocks(parts[:start]))
            given_stream(blocks, start, hidden)(stack)
            if interventions is not None:
                interventions(stack)
            return stopped_run(blocks, stop, call)

    def unembed(self, states: Tensor) -> Tensor:
        """(..., pos, d_model) final states of whole images -> (..., 1, output_width): the
        head's logits, or the class token's final state (module docstring)."""
        lead = states.shape[:-2]
        flat = states.reshape(-1, *states.shape[-2:])  # (batch, pos, d_model)
        if not self.has_head:
            out = flat[:, :1]  # (batch, 1, d_model): the class token
            post = getattr(self.body, "post_layernorm", None)  # CLIP's pooler_output
            out = post(out) if post is not None else out
        else:
            prefix = self.model.base_model_prefix
            channels = int(self.model.config.num_channels)
            dummy = flat.new_zeros(flat.shape[0], channels, 1, 1)  # read by the body alone
            setattr(self.model, prefix, FinalStates(flat))
            try:
                out = self.model(pixel_values=dummy).logits[:, None]  # (batch, 1, labels)
            finally:
                setattr(self.model, prefix, self.body)
        return out.reshape(*lead, *out.shape[-2:])


__all__ = ["PATCHES", "VisionRoute"]

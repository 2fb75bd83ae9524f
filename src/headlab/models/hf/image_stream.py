"""One image read by an image encoder (``VisionModel``: ViT, DINOv2 with or without registers,
CLIP's vision tower) as a one-stream runnable model, and the parts its embeddings are made of.

The score split (circuits/score_sides.py) reads one stream of tokens. ``ImageStream(model,
pixel_values)`` offers the run protocol (``models/run_protocol.py``) over the model's blocks for
that one image, held fixed: its "tokens" are the image's positions (``TokenLayout``: the class
token, the registers, the patches row by row), and the batch a run is handed (a ``TokenBatch``
of those positions) only says how many. It has no causal mask.

``embedding_parts()`` splits the stream entering the first block into what made it, by the
family's own modules: the embeddings module is run once per part with every other parameter of
it set to zero (``torch.func.functional_call``: the model is not touched). Each part is linear
in its own parameter (the patch convolution's weight applied to the pixels, the class token,
the registers, the position embeddings, DINOv2's interpolation of them included), and the
parameters left over (the convolution's bias) make a constant. CLIP's ``pre_layrnorm`` (the
stream's ``embedding_norm``) then runs on every part with its scale held at the image's own
(its "scale" site, frozen to the real run's: the norm is then affine), so each part arrives at
the first block as ``g * C(part) / s`` and the norm's shift joins the constant.

    PARTS           part name -> the embeddings' parameter names it keeps
    ImageStream(model, pixel_values)   .layout, .tokens(), .embedding_parts()
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import Block, Interventions, StopAt, Stream

#: Each part of an image encoder's embeddings, by the parameter names the families give it
#: (ViT and DINOv2: ``cls_token``, ``position_embeddings``, ``patch_embeddings.projection``;
#: DINOv2 with registers: ``register_tokens``; CLIP: ``class_embedding``,
#: ``position_embedding``, ``patch_embedding``). A family without one leaves the part out.
PARTS = {
    "patch-embed": ("patch_embeddings.projection.weight", "patch_embedding.weight"),
    "cls-token": ("cls_token", "class_embedding"),
    "register-tokens": ("register_tokens",),
    "pos-embed": ("position_embeddings", "position_embedding.weight"),
}
#: Largest share of the embeddings the parts and their constant may miss (else: a family whose
#: embeddings are not a sum of these parts).
ADDITIVE_TOLERANCE = 1e-6


class ImageStream:
    """The run protocol of ``model`` (a ``VisionModel``) on one image, ``pixel_values`` (1,
    channel, height, width) (module docstring)."""

    def __init__(self, model, pixel_values: Tensor) -> None:
        pixels = model.check_pixels(pixel_values)
        if pixels.shape[0] != 1:
            raise ValueError(f"an image stream reads one image, got {pixels.shape[0]}")
        self.vision = model
        self.pixels = pixels.to(next(model.model.parameters()))
        self.name = model.name
        self.causal = False
        self.model, self.config, self.layers = model.model, model.config, model.layers
        self.layout = model.layout(pixels)

    @property
    def output_width(self) -> int:
        return self.vision.output_width

    def streams(self) -> list[Stream]:
        return self.vision.streams()

    def blocks(self) -> list[Block]:
        return self.vision.blocks()

    def tokens(self) -> list[str]:
        """A label per position: "cls", "register R", "patch row,col"."""
        rows, cols = self.layout.grid
        labels = ["cls"] + [f"register {r}" for r in range(len(self.layout.registers))]
        return labels + [f"patch {r},{c}" for r in range(rows) for c in range(cols)]

    def ids(self) -> Tensor:
        """(1, pos) int64: the positions, the "tokens" a run of this stream is handed."""
        return torch.arange(self.layout.tokens)[None]

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
        """The image model's run on this image (``batch``: its positions, one row)."""
        return self.vision.run_blocks(
            self.pixels,
            start=start,
            hidden=hidden,
            copies=copies,
            stop=stop,
            rows=rows,
            keep=keep,
            interventions=interventions,
            sources=sources,
        )

    def unembed(self, states: Tensor) -> Tensor:
        return self.vision.unembed(states)

    def embedding_parts(self) -> tuple[list[str], Tensor]:
        """(names, parts (part, 1, pos, d_model)): each part of the stream entering the first
        block (module docstring), in ``PARTS``' order, those the family has; with the constant
        (the convolution's bias, the pre-norm's shift) they sum to that stream. ValueError where
        they do not sum to the embeddings' own output."""
        embeddings = self.vision.body.embeddings
        params = dict(embeddings.named_parameters())
        names = [n for n, keys in PARTS.items() if any(k in params for k in keys)]
        kept = [[k for k in PARTS[n] if k in params] for n in names]
        rest = [k for k in params if not any(k in keys for keys in kept)]

        def only(keys: list[str]) -> Tensor:  # the embeddings with only ``keys`` non-zero
            given = {k: (v if k in keys else torch.zeros_like(v)) for k, v in params.items()}
            return torch.func.functional_call(embeddings, given, (self.pixels,))

        with torch.no_grad():
            real = embeddings(self.pixels)  # (1, pos, d_model)
            parts = torch.stack([only(keys) for keys in kept] + [only(rest)])
        gap = float((parts.sum(0) - real).abs().max())
        if gap > ADDITIVE_TOLERANCE * max(float(real.abs().max()), 1e-12):
            raise ValueError(
                f"{self.name}'s embeddings are not the sum of their parts ({', '.join(names)}; "
                f"off by {gap:.3g}): its stream cannot be split into them"
            )
        norm = self.vision.streams()[0].embedding_norm
        if norm is not None:
            parts = self._through_norm(norm, parts[:-1], real)
        return names, parts[: len(names)]

    def _through_norm(self, norm, parts: Tensor, real: Tensor) -> Tensor:
        """(part, 1, pos, d_model): ``parts`` through ``norm``, held at the scale the real
        embeddings ``real`` give it (the last copy's), its shift (the zero copy's) taken off."""

        def hold(inv_s: Tensor) -> Tensor:  # (copies, pos, 1)
            return inv_s[-1:].expand_as(inv_s)

        copies = torch.cat([parts[:, 0], torch.zeros_like(real), real])
        with torch.no_grad(), intervene(norm, "scale", hold):
            copies = norm.module(copies)
        return (copies[:-2] - copies[-2:-1])[:, None]


__all__ = ["ADDITIVE_TOLERANCE", "PARTS", "ImageStream"]

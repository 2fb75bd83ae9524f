"""The score split's two sides (score_sides.py) on one image of an image encoder: ViT, DINOv2
with or without registers, CLIP's vision tower.

The stream entering a layer at a position is the sum of what wrote there, as in a text model,
with the embeddings split into their parts (``models.hf.image_stream``):

    patch-embed       the patch convolution's weight applied to the image's pixels (patches only)
    cls-token         the class token (position 0)
    register-tokens   the register tokens (DINOv2 with registers)
    pos-embed         the position embeddings (DINOv2: interpolated to the image's grid)
    L.H, mlp.L        every head's output through its W_O slice, every MLP's output
    out-bias          the constant: the convolution's bias, CLIP's pre-norm shift, the output
                      projections' biases

CLIP's ``pre_layrnorm`` is held at the image's scales, so each embedding part enters the first
block as ``g * C(part) / s``. Where a block adds more than a head's output through W_O (DINOv2's
layer scale: ``lambda * W_O head``), the writes are carried through the blocks with their norms
held (score_writes.py), which folds the layer scale in. The query and key maps are then the
text's (frozen_norms.py): the terms sum to the kernel's score exactly, given the frozen scales.
An image encoder has no causal mask: every position is a key of every query.

    ImageSides(ImageStream(model, pixel_values))   a ``Sides`` of that image
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.circuits.score_sides import LINEAR_TOLERANCE, Sides
from headlab.circuits.score_writes import block_writes
from headlab.models.hf.image_stream import ImageStream


class ImageSides(Sides):
    """One run of ``stream``'s image, kept once; then the query-side and key-side terms of any
    layer's heads at any positions, the embeddings split into their parts."""

    def __init__(self, stream: ImageStream) -> None:
        super().__init__(stream, stream.ids())
        self.embed_names, self.embed_parts = stream.embedding_parts()

    def components(self, layer: int) -> list[str]:
        """The embeddings' parts, every earlier head and MLP, then ``OUT_BIAS``."""
        return [*self.embed_names, *super().components(layer)[1:]]

    def writes(self, layer: int, rows: slice) -> Tensor:
        """(component, batch, rows, embed_dim): each of ``components(layer)``'s write at the
        positions ``rows``; they sum to the stream entering ``layer`` there."""
        stream = self.cache.resid[layer][:, rows]
        embed = self.embed_parts[:, :, rows].to(stream)
        found, biases = self._direct_writes(layer, rows)
        constant = found[0] - embed.sum(0)  # the convolution's bias, the pre-norm's shift
        found = [*embed, *found[1:]]
        rest = stream - torch.stack(found).sum(0)
        gap = float((rest - biases - constant).abs().max())
        self.direct = gap <= LINEAR_TOLERANCE * max(float(stream.abs().max()), 1e-12)
        if not self.direct:  # a layer scale: carry the writes through the blocks
            carried = embed
            for block in self.runner.blocks[:layer]:
                carried = block_writes(self.runner, self.cache, block, rows, carried)
            found = list(carried)
            rest = stream - carried.sum(0)
        return torch.stack([*found, rest])


__all__ = ["ImageSides"]

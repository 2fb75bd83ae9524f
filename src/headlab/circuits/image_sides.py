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
block as ``g * C(part) / s``. DINOv2 scales what each branch adds by a learned vector (its layer
scale: a head adds ``lambda1 * W_O head``, the MLP ``lambda2 * mlp``). ``branch_scales`` reads
that vector from the block's own run, without naming the family's parameter: the block runs once
on three copies of its stream, with its heads' outputs and its MLP's output given (all of them,
the heads zeroed, the MLP zeroed); each branch's part of the block's output, divided channel by
channel by the formula's write (W_O times the heads, the MLP's output), is its scale (ones in ViT
and CLIP), checked to fit every position. Where a block fits no such scale, the writes are
carried through the blocks with their norms held (score_writes.py) instead. The query and key
maps are then the text's (frozen_norms.py): the terms sum to the kernel's score exactly, given
the frozen scales. An image encoder has no causal mask: every position is a key of every query.

    ImageSides(ImageStream(model, pixel_values))   a ``Sides`` of that image
"""

from __future__ import annotations

from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene
from headlab.circuits.score_sides import LINEAR_TOLERANCE, Sides
from headlab.circuits.score_writes import block_writes
from headlab.models.hf.image_stream import ImageStream
from headlab.models.run_protocol import StopAt

#: How far, in units of the dtype's epsilon times the block's largest output, a branch's part
#: of the block's output may be from its write times the scale (two streams are subtracted).
SCALE_ROUNDING = 64


class ImageSides(Sides):
    """One run of ``stream``'s image, kept once; then the query-side and key-side terms of any
    layer's heads at any positions, the embeddings split into their parts."""

    def __init__(self, stream: ImageStream) -> None:
        super().__init__(stream, stream.ids())
        self.embed_names, self.embed_parts = stream.embedding_parts()
        #: whether the last ``writes`` took the formula with branch scales other than one
        self.scaled = False

    def components(self, layer: int) -> list[str]:
        """The embeddings' parts, every earlier head and MLP, then ``OUT_BIAS``."""
        return [*self.embed_names, *super().components(layer)[1:]]

    def writes(self, layer: int, rows: slice) -> Tensor:
        """(component, batch, rows, embed_dim): each of ``components(layer)``'s write at the
        positions ``rows``; they sum to the stream entering ``layer`` there. ``direct`` is
        True where they are the formula's writes unscaled (a head's source split may then take
        the formula too)."""
        stream = self.cache.resid[layer][:, rows]
        embed = self.embed_parts[:, :, rows].to(stream)
        found, biases, scaled = list(embed), torch.zeros_like(stream), False
        for block in self.runner.blocks[:layer]:
            writes, bias = self.layer_writes(block.index, rows)
            heads = block.attention.num_heads
            on_heads, on_mlp = self.branch_scales(block.index)
            scaled = scaled or bool(((on_heads - 1).abs().max() + (on_mlp - 1).abs().max()) > 0)
            found += [*(writes[:heads] * on_heads), *(writes[heads:] * on_mlp)]
            biases = biases + bias * on_heads
        constant = self.cache.resid[0][:, rows] - embed.sum(0)  # the conv's bias, pre-norm's shift
        rest = stream - torch.stack(found).sum(0)
        gap = float((rest - biases - constant).abs().max())
        fits = gap <= LINEAR_TOLERANCE * max(float(stream.abs().max()), 1e-12)
        self.direct = fits and not scaled
        self.scaled = fits and scaled  # the formula, with the branch scales (formula_scale)
        if not fits:  # not the formula: carry the writes through the blocks
            carried = embed
            for block in self.runner.blocks[:layer]:
                carried = block_writes(self.runner, self.cache, block, rows, carried)
            found = list(carried)
            rest = stream - carried.sum(0)
        return torch.stack([*found, rest])

    def formula_scale(self, index: int) -> Tensor | None:
        """The heads' branch scale of block ``index`` where the last ``writes`` took the formula
        with branch scales (DINOv2), else None."""
        return self.branch_scales(index)[0] if self.scaled else None

    def branch_scales(self, index: int) -> tuple[Tensor, Tensor]:
        """(heads' scale (embed_dim,), MLP's scale (embed_dim,)) of block ``index``: what each
        branch's write by the formula is multiplied by before the block adds it (module
        docstring); ones where a branch fits no per-channel scale (the writes are then carried
        through the blocks)."""
        kept = self.__dict__.setdefault("_branch_scales", {})
        if index in kept:
            return kept[index]
        block, cache = self.runner.blocks[index], self.cache
        heads, mlp = cache.head_outputs[index], cache.mlp[index]
        given_heads = torch.cat([heads, torch.zeros_like(heads), heads])
        given_mlp = None if mlp is None else torch.cat([mlp, mlp, torch.zeros_like(mlp)])

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(intervene(block.attention, "head_outputs", lambda t: given_heads))
            if given_mlp is not None:
                stack.enter_context(intervene(block, "mlp_out", lambda t: given_mlp))

        stream = cache.resid[index]
        with torch.no_grad():
            out = self.runner.forward(
                index, stream.repeat(3, 1, 1), 3, hooks, stop=StopAt(index, "resid_out")
            ).unflatten(0, (3, stream.shape[0]))
        writes, _ = self.layer_writes(index, slice(0, stream.shape[1]))
        count = block.attention.num_heads
        ones = torch.ones_like(stream[0, 0])
        bound = SCALE_ROUNDING * torch.finfo(stream.dtype).eps * float(out[0].abs().max())
        on_heads = _scale(writes[:count].sum(0), out[0] - out[1], ones, bound)
        on_mlp = (
            ones if mlp is None else _scale(writes[count:].sum(0), out[0] - out[2], ones, bound)
        )
        kept[index] = (on_heads, on_mlp)
        return kept[index]


def _scale(write: Tensor, added: Tensor, ones: Tensor, bound: float) -> Tensor:
    """(embed_dim,) the per-channel factor that takes ``write`` (batch, pos, embed_dim) to
    ``added`` (least squares over the positions); ``ones`` where ``write`` is ``added`` already,
    or where no factor fits within ``bound``."""
    x, y = write.flatten(0, 1), added.flatten(0, 1)
    if float((y - x).abs().max()) <= bound:  # no scale (ViT, CLIP): exactly ones
        return ones
    power = x.pow(2).sum(0)
    factor = torch.where(power > 0, (x * y).sum(0) / power.clamp_min(1e-300), ones)
    return factor if float((y - factor * x).abs().max()) <= bound else ones


__all__ = ["ImageSides"]

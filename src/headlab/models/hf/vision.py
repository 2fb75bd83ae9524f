"""``VisionModel``: a transformers image encoder (ViT, DINOv2 with or without registers, CLIP's
vision tower) on headlab's attention, with the layout of its tokens.

The model's own code runs untouched; every attention call goes to headlab's function, which
applies what each module's ``HFAttentionLayer`` holds (sites, a head mask). Its layers are found
by one short observed forward on a blank image (``probe``).

Images go through the model's own image processor (resized, cropped and normalised as the
model was trained); arrays that are already (batch, channel, height, width) pixel values go in
as they are. The tokens of one image, in order (``TokenLayout``):

    cls         position 0, the class token
    registers   the register tokens that follow it (``Dinov2WithRegisters``: 4), none otherwise
    patches     one token per patch, row by row: a (rows, cols) grid of ``patch_size`` pixels

    run(pixel_values, head_mask) -> the model's output (``last_hidden_state`` and, with
                ``hidden_states=True``, every block's input: norms per layer)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.models.hf.layer import HFAttentionLayer, keep_all, layer_of
from headlab.models.hf.probe import probe
from headlab.models.hf.probe_cache import probed_layers
from headlab.models.hf.runnable import model_family
from headlab.models.hf.vision_run import VisionRoute
from headlab.models.interface import HeadMask, layer_masks


@dataclass(frozen=True)
class TokenLayout:
    """Where each token of an image is: ``cls`` (0), ``registers`` (positions), the first patch
    ``first_patch`` and the patch grid ``grid`` (rows, cols), row by row."""

    cls: int
    registers: tuple[int, ...]
    first_patch: int
    grid: tuple[int, int]

    @property
    def tokens(self) -> int:
        return self.first_patch + self.grid[0] * self.grid[1]

    def patch_xy(self) -> Tensor:
        """(patches, 2) float (row, col) of each patch token."""
        rows, cols = self.grid
        r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        return torch.stack([r.reshape(-1), c.reshape(-1)], dim=-1).double()


class VisionModel(VisionRoute):
    """A transformers image encoder on headlab's attention (see the module docstring); with an
    image-classification head (``ViTForImageClassification``...), its body is the encoder and
    the head is the run protocol's output head (``vision_run.py``)."""

    def __init__(self, name: str, model: torch.nn.Module, processor=None, cached: bool = False):
        """``cached``: a model transformers built from a checkpoint, whose probe is kept in
        headlab's cache (``probe_cache``); a model in memory is always probed."""
        self.name = name
        self.model = model.eval()
        self.body = getattr(model, model.base_model_prefix, model)  # the encoder, headless
        self.processor = processor
        self.config = model.config
        self.family = model_family(model)
        self.patch_size = int(self.config.patch_size)
        self.registers = int(getattr(self.config, "num_register_tokens", 0) or 0)
        found = [layer_of(m) for m in self.model.modules()]
        layers = [layer for layer in found if layer is not None]
        if not layers:
            inputs = self._probe_inputs()
            find = probed_layers if cached else probe
            layers = keep_all(self.model, find(self.model, self.family, inputs=inputs))
        self.layers: list[HFAttentionLayer] = layers

    def _probe_inputs(self) -> dict:
        """A blank image for the probe: 2 x 2 patches where the model interpolates its position
        embeddings (DINOv2 always; ViT and CLIP when asked), else the model's own size."""
        import inspect

        size = self.image_size()
        asks = "interpolate_pos_encoding" in inspect.signature(self.body.forward).parameters
        if asks or self.family.startswith("dinov2"):
            size = (2 * self.patch_size, 2 * self.patch_size)
        blank = torch.zeros(1, int(self.config.num_channels), *size)
        inputs = {"pixel_values": blank.to(next(self.model.parameters()).device)}
        if asks:
            inputs["interpolate_pos_encoding"] = True
        return inputs

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def heads_per_layer(self) -> list[int]:
        return [layer.num_heads for layer in self.layers]

    def attention_layers(self) -> list[HFAttentionLayer]:
        return self.layers

    def image_size(self) -> tuple[int, int]:
        size = self.config.image_size
        return (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))

    # ------------------------------------------------------------------ inputs
    def pixels(self, images: list) -> Tensor:
        """(batch, channel, height, width) pixel values of ``images`` (PIL images or (height,
        width, channel) uint8 arrays) through the model's image processor. ValueError without
        one or without images."""
        if not images:
            raise ValueError("expected at least one image, got none")
        if self.processor is None:
            raise ValueError(f"{self.name} has no image processor: pass pixel values")
        return self.processor(images=images, return_tensors="pt")["pixel_values"]

    def check_pixels(self, pixel_values: Tensor) -> Tensor:
        """``pixel_values`` checked: (batch, channel, height, width) floats whose sides are
        multiples of the patch size. ValueError saying what was expected."""
        channels = int(self.config.num_channels)
        shape = tuple(pixel_values.shape)
        if pixel_values.dim() != 4 or shape[1] != channels or not pixel_values.is_floating_point():
            raise ValueError(
                f"pixel values must be (batch, {channels}, height, width) floats, got "
                f"{pixel_values.dtype} of shape {shape}"
            )
        if shape[2] % self.patch_size or shape[3] % self.patch_size:
            raise ValueError(
                f"image sides must be multiples of the patch size {self.patch_size}, got "
                f"{shape[2]} x {shape[3]}"
            )
        return pixel_values

    def layout(self, pixel_values: Tensor) -> TokenLayout:
        """The token layout of images of ``pixel_values``' size."""
        grid = (pixel_values.shape[2] // self.patch_size, pixel_values.shape[3] // self.patch_size)
        registers = tuple(range(1, 1 + self.registers))
        return TokenLayout(0, registers, 1 + self.registers, grid)

    # ------------------------------------------------------------------ running
    def run(self, pixel_values: Tensor, head_mask: HeadMask = None, hidden_states: bool = False):
        """The model's output on ``pixel_values``; ``head_mask`` scales each layer's heads before
        its W_O; ``hidden_states``: every block's input too (``output.hidden_states``)."""
        pixel_values = self.check_pixels(pixel_values)
        masks = layer_masks(head_mask, self.num_layers)
        try:
            for layer, mask in zip(self.layers, masks, strict=True):
                layer.head_mask = mask
            out = self.body(pixel_values=pixel_values, output_hidden_states=hidden_states)
        finally:
            for layer in self.layers:
                layer.head_mask = None
        tokens = out.last_hidden_state.shape[1]
        expected = self.layout(pixel_values).tokens
        if tokens != expected:
            raise ValueError(
                f"{self.name}: {tokens} tokens per image, expected {expected} (class token, "
                f"{self.registers} registers, one per patch): headlab cannot place them"
            )
        return out

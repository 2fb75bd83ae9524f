"""Per-head statistics of an image encoder over its patches, its high-norm tokens, and ablation.

``vision_statistics(model, pixel_batches)``: one forward per batch, each layer's weights (batch,
head, q_pos, k_pos) recorded at the kernel's weights site (an image has a few hundred tokens)
and every block's input read for the norms. Per (layer, head), the mean over every query
token of every image of:

    entropy, max_weight   as for text models (``attention.functional.entropy``)
    cls                   weight on the class token
    registers             weight on the register tokens together (models with registers)
    high_norm             weight on the layer's high-norm tokens (below)
    patch_distance        for patch queries: the mean 2-D distance, in patches, from the query's
                          patch to the patches it attends to, over its weight on patches
                          (sum_k w_k |x_q - x_k| / sum_k w_k over patch keys k): a local head
                          has a small one; the class token and registers have no place

High-norm tokens (Darcet et al., 2024): at each block's input, each token's norm divided by the
median norm of the image's patch tokens (``norm_ratios``, per image, per layer, per token; the
last layer is the model's output); a patch token whose ratio is above ``threshold`` is a
high-norm token of that layer, and ``high_norm`` is each head's weight on the high-norm tokens
of its own input.

``vision_ablation(model, pixel_batches, heads)``: 1 - cosine of the class token's output state
with and without ``heads`` (head mask 0, before W_O), averaged over images (0 without them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.functional import entropy
from headlab.attention.interventions import record
from headlab.heads.encoder_decoder_heads import check_heads, zero_masks
from headlab.models.hf.vision import TokenLayout, VisionModel
from headlab.results.stream_heads import KindAblation, VisionHeads

#: The statistics per head, in table order ("registers" only in a model with registers).
VISION_METRICS = ("entropy", "max_weight", "cls", "registers", "high_norm", "patch_distance")
#: A token this many times the median patch norm (or more) is a high-norm token.
THRESHOLD = 4.0
OBJECTIVE = "1 - cosine of the class token's output state (0 without ablation)"


def norm_ratios(states: Sequence[Tensor], layout: TokenLayout) -> Tensor:
    """(batch, layer + 1, pos) each token's norm over the median norm of its image's patches,
    at each block's input and the output (``states``: the model's hidden states)."""
    norms = torch.stack([s.double().norm(dim=-1) for s in states], dim=1)  # (batch, layer+1, pos)
    median = norms[..., layout.first_patch :].median(dim=-1).values  # (batch, layer + 1)
    return norms / median[..., None].clamp_min(1e-12)


def _head_means(weights: Tensor, layout: TokenLayout, high: Tensor) -> dict[str, Tensor]:
    """name -> (batch, head) means over queries of one layer's (batch, head, q_pos, k_pos)
    weights; ``high``: (batch, k_pos) bool, the layer's high-norm tokens."""
    w = weights.double()
    patches = slice(layout.first_patch, None)
    out = {
        "entropy": entropy(w).mean(-1),
        "max_weight": w.amax(-1).mean(-1),
        "cls": w[..., layout.cls].mean(-1),
    }
    if layout.registers:
        out["registers"] = w[..., list(layout.registers)].sum(-1).mean(-1)
    out["high_norm"] = (w * high[:, None, None, :]).sum(-1).mean(-1)
    xy = layout.patch_xy().to(w.device)
    apart = torch.cdist(xy, xy)  # (patches, patches) Euclidean, in patches
    on_patches = w[..., patches, patches]  # (batch, head, patches, patches)
    mass = on_patches.sum(-1).clamp_min(1e-300)
    out["patch_distance"] = ((on_patches * apart).sum(-1) / mass).mean(-1)
    return out


def vision_statistics(
    model: VisionModel,
    pixel_batches: Sequence[Tensor],
    *,
    threshold: float = THRESHOLD,
    on_batch: Callable[[int], None] | None = None,
) -> VisionHeads:
    """Per-head statistics and high-norm tokens over ``pixel_batches`` (see the module
    docstring). ValueError without images or for a threshold not above 1."""
    if not pixel_batches:
        raise ValueError("expected at least one image, got none")
    if not threshold > 1:
        raise ValueError(f"threshold must be above 1 (times the median norm), got {threshold}")
    sums: dict[str, Tensor] = {}
    ratios: list[Tensor] = []
    images = 0
    layout = None
    cls_rows: list = []  # (layer, head, k_pos): the first image's class-token query
    for pixels in pixel_batches:
        with ExitStack() as stack, torch.no_grad():
            recordings = [stack.enter_context(record(layer, ["weights"])) for layer in model.layers]
            out = model.run(pixels, hidden_states=True)
        layout = model.layout(pixels)
        ratio = norm_ratios(out.hidden_states, layout)  # (batch, layer + 1, pos)
        if not cls_rows:
            cls_rows = [r["weights"][0, :, layout.cls].float().tolist() for r in recordings]
        high = ratio > threshold
        high[..., : layout.first_patch] = False  # the class token and registers by name
        for i, recording in enumerate(recordings):
            for name, value in _head_means(recording["weights"], layout, high[:, i]).items():
                grid = sums.setdefault(
                    name, torch.zeros(model.num_layers, value.shape[-1], dtype=torch.float64)
                )
                grid[i] += value.sum(0)
        ratios.append(ratio)
        images += pixels.shape[0]
        if on_batch is not None:
            on_batch(images)
    metrics = {name: (grid / images).tolist() for name, grid in sums.items()}
    all_ratios = torch.cat(ratios) if len({r.shape[-1] for r in ratios}) == 1 else None
    notes = []
    if all_ratios is None:
        notes.append("norm ratios left out: the images have different token counts")
    return VisionHeads(
        model.name,
        images,
        model.num_layers,
        max(model.heads_per_layer),
        list(layout.grid),
        list(layout.registers),
        threshold,
        metrics,
        [] if all_ratios is None else all_ratios.float().tolist(),
        notes,
        cls_rows,
    )


def vision_ablation(
    model: VisionModel, pixel_batches: Sequence[Tensor], heads: Sequence[tuple[int, int]]
) -> KindAblation:
    """1 - cosine of the class token's output with and without ``heads`` (see the module
    docstring), averaged over the images."""
    check_heads(_Kinds(model), "encoder", heads)
    mask = zero_masks(_Kinds(model), "encoder", heads)
    total, images = 0.0, 0
    with torch.no_grad():
        for pixels in pixel_batches:
            base = model.run(pixels).last_hidden_state[:, 0]
            ablated = model.run(pixels, mask).last_hidden_state[:, 0]
            total += float((1 - torch.cosine_similarity(base, ablated, dim=-1)).sum())
            images += pixels.shape[0]
    if not images:
        raise ValueError("expected at least one image, got none")
    return KindAblation(
        model.name, images, "encoder", OBJECTIVE, [tuple(h) for h in heads], 0.0, total / images
    )


class _Kinds:
    """A vision model seen as one attention kind ("encoder"), as the head checks read it."""

    def __init__(self, model: VisionModel):
        self.model = model

    def heads_per_layer(self, kind: str) -> list[int]:
        return self.model.heads_per_layer

"""The inputs and the metric of a circuits run on an image encoder (ViT, DINOv2 with or without
registers, CLIP's vision tower), as ``headlab circuits --image --corrupted-image`` asks for it:
a clean and a corrupted image per pair, of one size once the model's image processor has read
them, and a metric on the model's readout of each image (``models/hf/vision_run.py``'s
``unembed``: one row per image). The graph, path patching and EAP are those of the
encoder-decoders (stream_graph.py, stream_patching.py, stream_attribution.py) on the one stream
of patches; ``stream_run.run_stream_circuits`` runs them.

The metric, higher meaning "more like the clean image":

- a classification head (``ViTForImageClassification``, ``Dinov2ForImageClassification``):
  ``logit_diff``, the logit of the clean image's predicted class minus that of the corrupted
  image's highest other class (its top class where the corruption changes the prediction), as
  IOI's logit difference (Wang et al. 2022): what a patched edge restores of the decision;
- no head (ViTModel, Dinov2Model, CLIP's vision tower): ``cls_projection``, the model's final
  class-token state (CLIP: after its post-layernorm, what its projection into the shared
  image-text space reads) projected on the unit direction from the corrupted image's to the
  clean image's. The state is what a linear probe, DINOv2's k-NN evaluation and CLIP's
  projection read; its projection is a linear readout, so its clean minus corrupted value is
  the distance between the two images' states and an edge's score is the part of that distance
  it carries, in the state's own units (a logit difference for a linear head not known here).

The model's performance in the results: for a head, the share of pairs whose predicted class
the corruption changes (the model tells the two images apart where that is at least half); with
no head, every pair counts (the check below refuses a pair whose states are equal).

    image_inputs(model, clean, corrupted)   -> StreamInputs (stream_run.py)
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.circuits.metrics import Metric, custom_metric
from headlab.circuits.stream_run import StreamInputs

#: The task's name in the results.
TASK = "clean-corrupted-image"
#: The metric of a model without a head.
CLS_PROJECTION = "cls_projection"


def _readout(model, pixels: Tensor) -> Tensor:
    """(batch, output_width): the model's readout of each image (no autograd)."""
    with torch.no_grad():
        return model.unembed(model.run_blocks(pixels))[:, 0]


def image_inputs(model, clean: Tensor, corrupted: Tensor) -> StreamInputs:
    """``clean`` and ``corrupted`` pixel values (batch, channel, height, width), one corrupted
    image per clean one, and the metric (module docstring). ValueError (one line) for images of
    two sizes, a head of one output, or a corrupted image the model reads exactly as its clean
    one."""
    if clean.shape != corrupted.shape:
        raise ValueError(
            "corrupted images: one per image, of its size after the image processor (patching "
            f"swaps patch by patch): expected {tuple(clean.shape)}, got {tuple(corrupted.shape)}"
        )
    good, bad = _readout(model, clean), _readout(model, corrupted)
    batch = clean.shape[0]
    kept = torch.ones(batch, 1, dtype=torch.bool)
    if model.has_head:
        if good.shape[-1] < 2:
            raise ValueError(
                f"{model.name}'s head gives {good.shape[-1]} output: a logit difference needs "
                "two classes or more"
            )
        answers = good.argmax(-1)  # (batch,)
        others = bad.clone()
        others[torch.arange(batch), answers] = -torch.inf
        wrong = others.argmax(-1)
        position = torch.zeros(1, dtype=torch.long)  # the one readout row of each image
        metric = Metric("logit_diff", position, kept.float(), answers[:, None], wrong[:, None])
        changed = float((bad.argmax(-1) != answers).double().mean())
        return StreamInputs(clean, corrupted, metric, TASK, changed)
    difference = good - bad  # (batch, d_model)
    length = difference.norm(dim=-1, keepdim=True)
    if bool((length == 0).any()):
        at = int((length[:, 0] == 0).nonzero()[0, 0])
        raise ValueError(
            f"corrupted image {at + 1} gives the model the same class-token state as its "
            "clean image: there is nothing to patch"
        )
    direction = (difference / length)[:, None]  # (batch, 1, d_model)

    def projection(states: Tensor) -> Tensor:  # (batch, 1, d_model) -> (batch, 1)
        return (states * direction.to(states)).sum(-1)

    metric = custom_metric(projection, kept, CLS_PROJECTION)
    return StreamInputs(clean, corrupted, metric, TASK, 1.0)


__all__ = ["CLS_PROJECTION", "TASK", "image_inputs"]

"""Every layer's attention weights on one batch, for any model behind ``HeadModel``.

The weights site of each layer is recorded for one forward (``attention.interventions.record``),
so the kernel takes its explicit path there and the weights are those of the model as it runs,
interventions included. A layer with no heads left gives (batch, 0, q_pos, k_pos).
"""

from __future__ import annotations

from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import record
from headlab.models.interface import HeadModel, TokenBatch


def attention_weights(model: HeadModel, batch: TokenBatch) -> tuple[Tensor, list[Tensor]]:
    """(the model's output, one (batch, head, q_pos, k_pos) weights tensor per layer)."""
    with ExitStack() as stack, torch.no_grad():
        recordings = [
            stack.enter_context(record(layer, ["weights"])) for layer in model.attention_layers()
        ]
        output = model.run(batch)
    size = batch.input_ids.shape
    weights = []
    for recording in recordings:
        calls = recording.calls["weights"]
        weights.append(calls[-1] if calls else torch.zeros(size[0], 0, size[1], size[1]))
    return output, weights

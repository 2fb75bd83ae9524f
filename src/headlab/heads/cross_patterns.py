"""One source-target pair's cross-attention weights, for the cross-attention view.

The statistics of an encoder-decoder are streamed sums (no weights held); the view of one cross
head's (target, source) pattern needs the weights themselves, so one more forward of a single
pair records them at the kernel's ``weights`` site of every cross-attention layer.

Every cross-attention head is kept. When their (target, source) arrays would hold more than
``budget`` values together, the source positions are summed in bins of consecutive positions
(the smallest bins that fit; a bin's label is its first position's), so that no head is
left out; the target is cut at ``MAX_TARGET`` tokens. Whisper's source is always 30 s (1500
positions): whisper-tiny's 24 cross heads on a target of 30 tokens keep bins of 4 positions
(80 ms) under the default budget, enough to follow an alignment head along the speech.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch

from headlab.attention.interventions import record
from headlab.models.hf.encoder_decoder import EncoderDecoderModel, SourceBatch
from headlab.models.interface import TokenBatch
from headlab.results.kind_views import CrossPatterns

#: The most weights kept in a results file for the view (4 bytes each drawn, ~9 as JSON text).
BUDGET = 300_000
#: The most target tokens kept (a longer target is cut; the view says so).
MAX_TARGET = 128


def cross_patterns(
    model: EncoderDecoderModel, source: SourceBatch, target: TokenBatch, budget: int = BUDGET
) -> CrossPatterns:
    """Every cross-attention head's weights on the first row of (``source``, ``target``), the
    source binned to fit ``budget`` values (see the module docstring)."""
    layers = model.layers["cross"]
    row = slice(0, 1)
    first_source = SourceBatch(
        {k: v[row] for k, v in source.inputs.items()}, source.mask[row], source.labels[:1]
    )
    first_target = TokenBatch(target.input_ids[row], target.attention_mask[row], target.tokens[:1])
    with ExitStack() as stack, torch.no_grad():
        recordings = [stack.enter_context(record(layer, ["weights"])) for layer in layers]
        model.run(first_source, first_target)
    n_target = int(first_target.attention_mask[0].sum())
    n_source = int(first_source.mask[0].sum())
    notes = []
    if n_target > MAX_TARGET:
        notes.append(f"the target is cut at {MAX_TARGET} of its {n_target} tokens")
        n_target = MAX_TARGET
    heads = [(layer, head) for layer, cross in enumerate(layers) for head in range(cross.num_heads)]
    size = -(-len(heads) * n_target * n_source // max(1, budget))  # ceil: positions per bin
    bins = -(-n_source // size)
    if size > 1:
        notes.append(
            f"source positions summed in bins of {size} (each labelled by its first), "
            f"so that the {len(heads)} heads fit {budget:,} weights"
        )
    weights = []
    for layer, head in heads:
        w = recordings[layer]["weights"][0, head, :n_target, :n_source].double()  # (q, k_pos)
        padded = torch.nn.functional.pad(w, (0, bins * size - n_source))
        weights.append(padded.view(n_target, bins, size).sum(-1).float().tolist())  # (q, bin)
    labels = list(first_source.labels[0][:n_source])[::size]
    targets = list(first_target.tokens[0][:n_target])
    return CrossPatterns(heads, targets, labels, weights, notes)

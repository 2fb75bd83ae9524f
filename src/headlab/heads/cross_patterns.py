"""One source-target pair's cross-attention weights, for the cross-attention view.

The statistics of an encoder-decoder are streamed sums (no weights held); the view of one cross
head's (target, source) pattern needs the weights themselves, so one more forward of a single
pair records them at the kernel's ``weights`` site of every cross-attention layer.

Which heads are kept: all of them when their (target, source) arrays fit ``budget`` values
together, else the sharpest (the largest mean max_weight in the run's statistics) that fit, at
least one; the target is cut at ``MAX_TARGET`` tokens. Whisper's source is always 30 s (1500
positions), so a Whisper pair of 30 target tokens keeps 6 heads' 45,000 weights each under the
default budget.
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
    model: EncoderDecoderModel,
    source: SourceBatch,
    target: TokenBatch,
    sharpness: list[list[float]],
    budget: int = BUDGET,
) -> CrossPatterns:
    """The first row of (``source``, ``target``)'s cross-attention weights of the heads chosen by
    ``sharpness`` ((layer, head) grid, larger first; see the module docstring)."""
    layers = model.layers["cross"]
    row = slice(0, 1)
    first_source = SourceBatch({k: v[row] for k, v in source.inputs.items()}, source.mask[row],
                               source.labels[:1])  # fmt: skip
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
    ranked = sorted(((value, layer, head) for layer, values in enumerate(sharpness)
                     for head, value in enumerate(values)), key=lambda c: -c[0])  # fmt: skip
    keep = max(1, min(len(ranked), budget // max(1, n_target * n_source)))
    if keep < len(ranked):
        notes.append(f"{keep} of {len(ranked)} cross-attention heads kept (the sharpest: the "
                     f"largest max_weight), within {budget:,} weights")  # fmt: skip
    chosen = sorted((layer, head) for _, layer, head in ranked[:keep])
    weights = []
    for layer, head in chosen:
        w = recordings[layer]["weights"][0, head, :n_target, :n_source]  # (q_pos, k_pos)
        weights.append(w.float().tolist())
    targets = list(first_target.tokens[0][:n_target])
    return CrossPatterns(chosen, targets, list(first_source.labels[0][:n_source]), weights, notes)

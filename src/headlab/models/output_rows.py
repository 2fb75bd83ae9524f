"""A language model's next-token logits a block of positions at a time, never whole.

At 8192 tokens SmolLM2's (pos, vocab) float32 logits take 8192 x 49152 x 4 B = 1.6 GB, more
than most of the forward; no statistic needs them whole. A model may offer
``run_rows(batch, head_mask) -> OutputRows``: it runs its body once and applies its output head
(with the family's own post-processing: Gemma 2's soft-cap, Cohere's logit scale ...) to the
rows asked for. ``output_rows`` falls back to ``run`` for a model without it (the whole logits
then exist once, as before). ``next_token_scores`` reduces them block by block to what the
analyses read: each position's top-1 prediction and the cross-entropy of its next token.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.models.interface import HeadMask, HeadModel, TokenBatch

#: Positions whose logits (and their float64 log-softmax) are alive at a time
#: (512 x 49152 x 8 B = 192 MiB for SmolLM2).
LOGIT_ROWS = 512


class OutputRows(Protocol):
    """A causal model's output after one forward, its logits computed on request.

    num_positions: the batch's positions; ``logits(rows)``: (batch, rows, vocab) for a slice of
    positions, exactly what ``run`` gives at those positions."""

    num_positions: int

    def logits(self, rows: slice) -> Tensor: ...


class WholeOutput:
    """``OutputRows`` over a (batch, pos, vocab) output computed whole (the fallback)."""

    def __init__(self, output: Tensor) -> None:
        self.output = output
        self.num_positions = output.shape[1]

    def logits(self, rows: slice) -> Tensor:
        return self.output[:, rows]  # (batch, rows, vocab)


def output_rows(model: HeadModel, batch: TokenBatch, head_mask: HeadMask = None) -> OutputRows:
    """One forward of a next-token ``model`` on ``batch``, its logits left to be computed a
    block at a time (``model.run_rows``), or whole where the model cannot (``model.run``)."""
    if model.objective_kind != "next-token":
        raise ValueError(
            f"expected a next-token model, got {model.name} with objective {model.objective_kind!r}"
        )
    run_rows = getattr(model, "run_rows", None)
    if run_rows is None:
        return WholeOutput(model.run(batch, head_mask))
    return run_rows(batch, head_mask)


@torch.no_grad()
def next_token_scores(
    output: OutputRows, input_ids: Tensor, rows: int | None = None
) -> tuple[Tensor, Tensor]:
    """(top-1 prediction (batch, pos - 1) int64, cross-entropy of the actual next token
    (batch, pos - 1) float64) at positions 0 .. pos - 2, from ``rows`` positions' logits at a
    time (default ``LOGIT_ROWS``). input_ids: (batch, pos), the tokens ``output`` was computed
    on."""
    rows = rows or LOGIT_ROWS
    n = output.num_positions - 1
    if input_ids.shape[1] != output.num_positions:
        raise ValueError(
            f"expected ids of {output.num_positions} positions, got {input_ids.shape[1]}"
        )
    top1 = torch.empty(input_ids.shape[0], max(n, 0), dtype=torch.long)
    losses = torch.empty(input_ids.shape[0], max(n, 0), dtype=torch.float64)
    for start in range(0, n, rows):
        block = slice(start, min(start + rows, n))
        logits = output.logits(block)  # (batch, rows, vocab)
        top1[:, block] = logits.argmax(-1)
        wide = logits.double()  # (batch, rows, vocab)
        del logits  # before the log-softmax makes a second float64 block: two blocks alive, not 2.5
        targets = input_ids[:, block.start + 1 : block.stop + 1]  # (batch, rows)
        losses[:, block] = F.cross_entropy(
            wide.flatten(0, 1), targets.flatten(), reduction="none"
        ).view_as(targets)
        del wide
    return top1, losses

"""A transformers causal model's logits a block of positions at a time (``OutputRows``).

The body (``model.<base_model_prefix>``) runs once; for each block, the model's own forward
runs again with its body stood in for by a module that returns that block's final hidden
states, so that the family's own head and post-processing (Gemma 2's final soft-cap, Cohere's
logit scale, Granite's logit scaling ...) apply unchanged: no list of families to keep.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from headlab.models.interface import TokenBatch
from headlab.models.output_rows import LOGIT_ROWS


class _BodyOutputs:
    """What a body returns, holding only the final hidden states: every other field a family's
    head may read (cache, router logits of experts, ...) is None."""

    def __init__(self, states: Tensor) -> None:
        self.last_hidden_state = states

    def __getattr__(self, name: str) -> None:  # only for fields not set above
        return None

    def __getitem__(self, index: int) -> Tensor | None:
        return self.states if index == 0 else None

    @property
    def states(self) -> Tensor:
        return self.last_hidden_state


class FinalStates(nn.Module):
    """Stands in for a model's body: returns the given final hidden states, whatever it is
    asked."""

    def __init__(self, states: Tensor) -> None:
        super().__init__()
        self.states = states  # (batch, rows, embed_dim)

    def forward(self, *args, **kwargs) -> _BodyOutputs:
        return _BodyOutputs(self.states)


class HFOutputRows:
    """The final hidden states (batch, pos, embed_dim) of one forward of ``causal_lm``;
    ``logits(rows)`` -> (batch, rows, vocab) through the model's own head."""

    def __init__(self, causal_lm: nn.Module, states: Tensor) -> None:
        self.causal_lm = causal_lm
        self.states = states
        self.num_positions = states.shape[1]

    def logits(self, rows: slice) -> Tensor:
        prefix = self.causal_lm.base_model_prefix
        body = getattr(self.causal_lm, prefix)
        block = self.states[:, rows]  # (batch, rows, embed_dim)
        ids = torch.zeros(block.shape[:2], dtype=torch.long, device=block.device)
        setattr(self.causal_lm, prefix, FinalStates(block))
        try:
            return self.causal_lm(input_ids=ids, use_cache=False).logits  # (batch, rows, vocab)
        finally:
            setattr(self.causal_lm, prefix, body)


def body_states(causal_lm: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """(batch, pos, embed_dim) final hidden states of ``causal_lm``'s body (no output head)."""
    body = getattr(causal_lm, causal_lm.base_model_prefix)
    out = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return out.last_hidden_state


def next_token_loss(rows: HFOutputRows, batch: TokenBatch, block: int = LOGIT_ROWS) -> Tensor:
    """``objectives.next_token_loss`` of the model behind ``rows`` (the mean cross-entropy of
    each real token given the ones before), with autograd, without the (batch, pos, vocab)
    logits: ``block`` positions' logits at a time, made again in the backward
    (``torch.utils.checkpoint``), so that one block's logits and their gradient live at once."""
    targets = batch.input_ids[:, 1:].masked_fill(~batch.attention_mask[:, 1:], -100)
    count = (targets != -100).sum()
    total = rows.states.new_zeros(())
    for start in range(0, targets.shape[1], block):
        stop = min(start + block, targets.shape[1])

        def part(states: Tensor, wanted: Tensor = targets[:, start:stop]) -> Tensor:
            logits = HFOutputRows(rows.causal_lm, states).logits(slice(None))
            return F.cross_entropy(
                logits.flatten(0, 1).float(), wanted.flatten(), ignore_index=-100, reduction="sum"
            )

        total = total + checkpoint(part, rows.states[:, start:stop], use_reentrant=False)
    return total / count

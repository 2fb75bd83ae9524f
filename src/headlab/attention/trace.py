"""The intermediates of one multi-head attention call, per head."""

from __future__ import annotations

from dataclasses import dataclass, fields

from torch import Tensor


@dataclass(frozen=True)
class AttentionTrace:
    """Every intermediate of one call, batch first, batch dimension always present.

    Shapes (``head`` counts query heads, ``kv_head`` the K/V heads, equal without GQA; ``k_pos``
    includes the key columns added by ``add_bias_kv`` and ``add_zero_attn``):

    q:             (batch, head, q_pos, d_head)     queries after W_Q and the bias
    k:             (batch, kv_head, k_pos, d_head)  keys after W_K (and bias_k / zero_attn)
    v:             (batch, kv_head, k_pos, d_head)  values likewise
    scores:        (batch, head, q_pos, k_pos)      q k^T / sqrt(d_head) plus the additive mask
                                                     (-inf where masked; 0 on fully masked rows)
    weights:       (batch, head, q_pos, k_pos)      softmax(scores), rows sum to 1 (0 when fully
                                                     masked); after dropout in training mode
    head_outputs:  (batch, head, q_pos, d_head)     weights @ v times the head mask, before W_O
    contributions: (batch, head, q_pos, embed_dim)  head_outputs[:, i] @ W_O[:, block i]^T
    output:        (batch, q_pos, embed_dim)        out_proj(concat(head_outputs)), forward's
                                                     output bit for bit; contributions.sum(head)
                                                     + out_proj.bias equals it up to rounding
    """

    q: Tensor
    k: Tensor
    v: Tensor
    scores: Tensor
    weights: Tensor
    head_outputs: Tensor
    contributions: Tensor
    output: Tensor

    def detach(self) -> AttentionTrace:
        """A copy with every tensor detached from the autograd graph."""
        return AttentionTrace(**{f.name: getattr(self, f.name).detach() for f in fields(self)})


@dataclass(frozen=True)
class HeadRun:
    """One call of MultiHeadAttention up to the head outputs, batch first (AttentionTrace's
    shapes), as ``MultiHeadAttention.run_heads`` returns it: forward, trace and head views
    build their results from it."""

    batched: bool
    head_out: Tensor  # (batch, head, q_pos, d_head), after head_mask and interventions
    weights: Tensor | None  # (batch, head, q_pos, k_pos); averaged path: (batch, q_pos, k_pos)
    q: Tensor
    k: Tensor
    v: Tensor
    scores: Tensor | None

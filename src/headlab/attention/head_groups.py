"""The same attention weights viewed with fewer heads when heads cannot simply be re-split.

``MultiHeadAttention.with_num_heads`` re-splits the projections: a head of size m*D whose score is
(concat of m heads' q)(concat of their k)^T / sqrt(m*D). That sum of m per-head scores divided by
sqrt(m) is also defined when the m heads do not have their own K (grouped K/V heads: several
query heads read one K/V head) or when q and k are rotated per head (RoPE): this module computes
it from the original heads' rotated q and k,

    S_merged = sum_{i in group} S_i / sqrt(m)       S_i = q_i k_{g(i)}^T / sqrt(D) + mask
    P = softmax(S_merged)      every member i of the group outputs P v_{g(i)}

so that each new head is one attention pattern over the group's own values. With plain
multi-head attention it equals ``with_num_heads`` (tested); for a Llama layer with 9 query heads
on 3 K/V heads, ``HeadGroupView(attention, 3)`` gives one head per K/V group.
"""

from __future__ import annotations

from torch import Tensor, nn

from headlab.attention.functional import expand_kv, merge_heads
from headlab.attention.module import MultiHeadAttention


class HeadGroupView(nn.Module):
    """``attention`` (parameters shared) with its query heads merged into ``num_heads`` groups
    of consecutive heads. Forward has MultiHeadAttention's signature (batch first only)."""

    def __init__(self, attention: MultiHeadAttention, num_heads: int) -> None:
        super().__init__()
        if num_heads <= 0 or attention.num_heads % num_heads:
            raise ValueError(
                f"num_heads must divide the {attention.num_heads} query heads, got {num_heads}"
            )
        if not attention.batch_first:
            raise ValueError("HeadGroupView needs a batch_first attention module")
        self.base = attention
        self.num_heads = num_heads
        self.num_kv_heads = min(num_heads, attention.num_kv_heads)
        self.head_dim = attention.head_dim * (attention.num_heads // num_heads)
        self.embed_dim = attention.embed_dim

    def weights(self, query: Tensor, **mask: object) -> tuple[Tensor, Tensor]:
        """(merged weights (batch, num_heads, q_pos, k_pos), values (batch, H, k_pos, D))."""
        t = self.base.trace(query, **mask)
        batch, heads, q_pos, k_pos = t.scores.shape
        m = heads // self.num_heads
        merged = t.scores.view(batch, self.num_heads, m, q_pos, k_pos).sum(dim=2) / m**0.5
        return merged.softmax(dim=-1), expand_kv(t.v, heads // t.v.shape[1])

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        *,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        if key is not query or value is not query:
            raise ValueError("HeadGroupView supports self-attention only (key and value = query)")
        p, v = self.weights(
            query, key_padding_mask=key_padding_mask, attn_mask=attn_mask, is_causal=is_causal
        )
        m = self.base.num_heads // self.num_heads
        # every member head of a group: the group's weights on its own values
        expanded = p.repeat_interleave(m, dim=1)  # (batch, H, q_pos, k_pos)
        head_out = expanded @ v  # (batch, H, q_pos, D)
        if head_mask is not None:
            scale = head_mask.view(-1, self.num_heads, 1, 1).repeat_interleave(m, dim=1)
            head_out = head_out * scale
        output = self.base.out_proj(merge_heads(head_out))
        if not need_weights:
            return output, None
        return output, p.mean(dim=1) if average_attn_weights else p


def grouped_view(attention: MultiHeadAttention, num_heads: int) -> nn.Module:
    """The same parameters viewed with ``num_heads`` heads: ``with_num_heads`` where it applies
    (no grouped K/V, no rotary positions), else a ``HeadGroupView``."""
    if num_heads == attention.num_heads:
        return attention
    plain = attention.num_kv_heads == attention.num_heads and attention.rotary_base is None
    return attention.with_num_heads(num_heads) if plain else HeadGroupView(attention, num_heads)


__all__ = ["HeadGroupView", "grouped_view"]

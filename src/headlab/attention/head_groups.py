"""The same attention weights viewed with fewer heads when heads cannot simply be re-split.

``MultiHeadAttention.with_num_heads`` re-splits the projections: a head of size m*D whose score is
(concat of m heads' q)(concat of their k)^T / sqrt(m*D). That sum of m per-head scores divided by
sqrt(m) is also defined when the m heads do not have their own K (grouped K/V heads: several
query heads read one K/V head) or when q and k are rotated per head (RoPE): the kernel's head
view (``headlab.attention.kernel``, ``head_view``) computes it from the original heads' rotated
q and k,

    S_merged = sum_{i in group} S_i / sqrt(m)       S_i = q_i k_{g(i)}^T / sqrt(D)
    P = softmax(S_merged + mask)      every member i of the group outputs P v_{g(i)}

so that each new head is one attention pattern over the group's own values. With plain
multi-head attention it equals ``with_num_heads`` (tested); for a Llama layer with 9 query heads
on 3 K/V heads, ``HeadGroupView(attention, 3)`` gives one head per K/V group.
"""

from __future__ import annotations

from torch import Tensor, nn

from headlab.attention import layout
from headlab.attention.functional import merge_heads
from headlab.attention.module import MultiHeadAttention
from headlab.attention.sites import Sites


class HeadGroupView(nn.Module):
    """``attention`` (parameters shared) with its query heads merged into ``num_heads`` groups
    of consecutive heads. Forward has MultiHeadAttention's signature."""

    def __init__(self, attention: MultiHeadAttention, num_heads: int) -> None:
        super().__init__()
        if num_heads <= 0 or attention.num_heads % num_heads:
            raise ValueError(
                f"num_heads must divide the {attention.num_heads} query heads, got {num_heads}"
            )
        self.base = attention
        self.num_heads = num_heads
        self.num_kv_heads = min(num_heads, attention.num_kv_heads)
        self.head_dim = attention.head_dim * (attention.num_heads // num_heads)
        self.embed_dim = attention.embed_dim
        self.sites = Sites()  # the view's own interventions and observers, not the base's

    def query_key_weights(self) -> tuple[Tensor, Tensor]:
        raise ValueError("a view of merged heads has no W_Q and W_K of its own")

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
        """As ``MultiHeadAttention.forward``; weights (batch, head, q_pos, k_pos) are the
        merged heads' and ``head_mask`` has one entry per merged head."""
        m = self.base.num_heads // self.num_heads
        if head_mask is not None:  # one entry per merged head -> one per member head
            head_mask = head_mask.repeat_interleave(m, dim=-1)
        run = self.base.run_heads(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            is_causal=is_causal,
            head_mask=head_mask,
            need_weights=("mean" if average_attn_weights else "heads") if need_weights else None,
            head_view=self.num_heads,
            sites=self.sites,
        )
        out = self.base.out_proj(merge_heads(run.head_out))  # (batch, q_pos, d_model)
        first = self.base.batch_first
        output = layout.from_batch_first(out, batched=run.batched, batch_first=first)
        if not need_weights:
            return output, None
        weights = run.weights
        return output, weights if run.batched else weights.squeeze(0)


def grouped_view(attention: MultiHeadAttention, num_heads: int) -> nn.Module:
    """The same parameters viewed with ``num_heads`` heads: ``with_num_heads`` where it applies
    (no grouped K/V, no rotary positions), else a ``HeadGroupView``."""
    if num_heads == attention.num_heads:
        return attention
    plain = attention.num_kv_heads == attention.num_heads and attention.rotary_base is None
    return attention.with_num_heads(num_heads) if plain else HeadGroupView(attention, num_heads)


__all__ = ["HeadGroupView", "grouped_view"]

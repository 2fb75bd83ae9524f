"""What torch's Transformer layers ask of their ``self_attn`` beyond calling it.

``nn.TransformerEncoderLayer`` (and ``nn.TransformerEncoder``'s nested-tensor path) in eval mode
without grad skip the attention module's forward: they read ``_qkv_same_embed_dim``, call
``merge_masks`` and hand ``in_proj_weight`` to torch's fused kernel
(``torch._transformer_encoder_layer_fwd``), which knows nothing but plain multi-head attention.
``MultiHeadAttention`` therefore answers ``_qkv_same_embed_dim`` with
``fused_kernel_computes_forward``: True only where that kernel computes what headlab's forward
computes; everywhere else torch falls back to calling the module's forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

if TYPE_CHECKING:
    from headlab.attention.module import MultiHeadAttention


def fused_kernel_computes_forward(m: MultiHeadAttention) -> bool:
    """Whether torch's fused encoder kernel, given ``m.in_proj_weight`` and ``m.num_heads``,
    computes ``m``'s forward: packed projections, H heads of E/H, no extras, no intervention."""
    return (
        m.in_proj_weight is not None
        and m.num_kv_heads == m.num_heads
        and m.num_heads * m.head_dim == m.embed_dim
        and m.rotary_base is None
        and not m.causal
        and m.bias_k is None
        and not m.add_zero_attn
        and not m._interventions
    )


def torch_merge_masks(
    num_heads: int, attn_mask: Tensor | None, key_padding_mask: Tensor | None, query: Tensor
) -> tuple[Tensor | None, int | None]:
    """``torch.nn.MultiheadAttention.merge_masks``, same meaning: (merged mask, mask type).

    key_padding_mask (batch, q_pos) alone is type 1, returned as it is; an attn_mask
    ((q_pos, q_pos) or (batch * head, q_pos, q_pos)) gives type 2, expanded to
    (batch, head, q_pos, q_pos) and added to the padding mask if there is one. query:
    (batch, q_pos, E). torch's fused encoder kernel takes the pair.
    """
    mask_type: int | None = None
    merged: Tensor | None = None
    if key_padding_mask is not None:
        mask_type, merged = 1, key_padding_mask
    if attn_mask is not None:
        batch, seq, _ = query.shape
        mask_type = 2
        if attn_mask.dim() == 3:
            merged = attn_mask.view(batch, -1, seq, seq)
        else:
            merged = attn_mask.view(1, 1, seq, seq).expand(batch, num_heads, -1, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask.view(batch, 1, 1, seq).expand(-1, num_heads, -1, -1)
            merged = merged + padding
    return merged, mask_type

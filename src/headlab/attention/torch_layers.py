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

import torch
from torch import Tensor, nn

#: headlab's ``attention.module.MultiHeadAttention`` (which imports this module; named here by
#: its base class, so that no import circle forms)
MultiHeadAttention = nn.Module


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
        and not m.sites
    )


def torch_merge_masks(
    num_heads: int, attn_mask: Tensor | None, key_padding_mask: Tensor | None, query: Tensor
) -> tuple[Tensor | None, int | None]:
    """``torch.nn.MultiheadAttention.merge_masks``, same meaning: (merged mask, mask type).

    key_padding_mask (batch, q_pos) alone is type 1, returned as it is; an attn_mask
    ((q_pos, q_pos) or (batch * head, q_pos, q_pos)) gives type 2, expanded to
    (batch, head, q_pos, q_pos) and added to the padding mask if there is one. query:
    (batch, q_pos, d_model). torch's fused encoder kernel takes the pair.
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


def padded_from_nested(x: Tensor) -> tuple[Tensor, Tensor]:
    """A nested (batch, pos_i, d_model) tensor -> (padded (batch, pos, d_model), key_padding_mask
    (batch, pos), True on padding). nn.TransformerEncoder hands such a tensor to each layer."""
    padded = x.to_padded_tensor(0.0)
    lengths = torch.tensor([t.shape[0] for t in x.unbind()], device=padded.device)
    positions = torch.arange(padded.shape[1], device=padded.device)
    return padded, positions[None, :] >= lengths[:, None]


def nested_from_padded(x: Tensor, padding: Tensor) -> Tensor:
    """The inverse of ``padded_from_nested``: (batch, pos, d_model) and its padding mask ->
    nested."""
    return torch._nested_tensor_from_mask(x, padding.logical_not(), mask_check=False)


def forward_nested(
    module: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor, **options: object
) -> tuple[Tensor, None]:
    """Self-attention on a nested batch_first ``query`` (batch, pos_i, d_model): padded, run with
    its padding as key_padding_mask, and nested again. Raises ValueError for anything else."""
    if key is not query or value is not query or not module.batch_first:
        raise ValueError(
            "nested tensor input needs self-attention (key is value is query) "
            "and batch_first=True, as nn.TransformerEncoder's nested path has"
        )
    if options.get("attn_mask") is not None or options.get("key_padding_mask") is not None:
        raise ValueError("nested tensor input takes no attn_mask or key_padding_mask")
    padded, padding = padded_from_nested(query)
    out, _ = module(
        padded,
        padded,
        padded,
        key_padding_mask=padding,
        need_weights=False,
        is_causal=bool(options.get("is_causal", False)),
        head_mask=options.get("head_mask"),
    )
    return nested_from_padded(out, padding), None

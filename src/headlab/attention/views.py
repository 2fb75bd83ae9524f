"""The same parameters seen with another head count (``MultiHeadAttention.with_num_heads``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from headlab.attention.sizes import check_positive_int, resolve_head_sizes

if TYPE_CHECKING:
    from headlab.attention.module import MultiHeadAttention

# Plain attributes a view copies from its module; the head counts are the view's own.
_SHARED = (
    "embed_dim",
    "kdim",
    "vdim",
    "dropout",
    "batch_first",
    "add_zero_attn",
    "rotary_base",
    "causal",
)


def view_head_sizes(module: MultiHeadAttention, num_heads: int, num_kv_heads: int | None):
    """(head_dim, num_kv_heads) of ``module``'s projections split into ``num_heads`` heads.

    The projection widths stay: head_dim becomes (H * D) / num_heads. Without ``num_kv_heads``
    the K/V width is split by the new head_dim. Raises ValueError when the widths do not split.
    """
    q_dim = module.num_heads * module.head_dim
    kv_dim = module.num_kv_heads * module.head_dim
    check_positive_int("num_heads", num_heads)
    if q_dim % num_heads:
        raise ValueError(
            f"embed_dim={q_dim} is not divisible by num_heads={num_heads}"
            if q_dim == module.embed_dim
            else f"query width num_heads*head_dim={q_dim} is not divisible by num_heads={num_heads}"
        )
    head_dim = q_dim // num_heads
    if num_kv_heads is None:
        if kv_dim % head_dim:
            raise ValueError(
                f"K/V width {kv_dim} is not divisible by the new head_dim={head_dim}; "
                "pass num_kv_heads"
            )
        num_kv_heads = kv_dim // head_dim
    if num_kv_heads * head_dim != kv_dim:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} with head_dim={head_dim} gives K/V width "
            f"{num_kv_heads * head_dim}, the parameters have {kv_dim}"
        )
    resolve_head_sizes(q_dim, num_heads, head_dim, num_kv_heads)
    return head_dim, num_kv_heads


def with_num_heads(
    module: MultiHeadAttention, num_heads: int, num_kv_heads: int | None = None
) -> MultiHeadAttention:
    """A module of ``module``'s class sharing its parameters (not copies), with new head counts."""
    head_dim, num_kv_heads = view_head_sizes(module, num_heads, num_kv_heads)
    view = type(module).__new__(type(module))
    nn.Module.__init__(view)
    for name in _SHARED:
        setattr(view, name, getattr(module, name))
    view.num_heads, view.head_dim, view.num_kv_heads = num_heads, head_dim, num_kv_heads
    view._interventions = {}
    for name, param in module._parameters.items():
        view.register_parameter(name, param)
    view.bias_k, view.bias_v = module.bias_k, module.bias_v
    view.out_proj = module.out_proj
    view.train(module.training)
    return view

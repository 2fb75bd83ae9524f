"""The same parameters seen with another head count (``MultiHeadAttention.with_num_heads``)."""

from __future__ import annotations

from typing import Any, TypeVar

from torch import nn

from headlab.attention.sites import Sites
from headlab.attention.sizes import check_positive_int, resolve_head_sizes

#: headlab's ``attention.module.MultiHeadAttention`` (which imports this module; named here by
#: its base class, so that no import circle forms)
MultiHeadAttention = nn.Module

# Plain attributes a view copies from its module; the head counts are the view's own.
M = TypeVar("M", bound=nn.Module)


def shared_view(module: M, **replaced: Any) -> M:
    """A new module of ``module``'s class sharing its parameters, buffers, submodules and plain
    attributes (the same objects, not copies), with ``replaced`` attributes set instead.

    The view has its own registries, so replacing a submodule in it leaves ``module`` unchanged;
    hooks are not carried over. ``with_num_heads`` and the models' ``with_layers`` use it.
    """
    view = type(module).__new__(type(module))
    nn.Module.__init__(view)
    bookkeeping = set(vars(view))  # nn.Module's registries, hooks and training flag
    for name, value in vars(module).items():
        if name not in bookkeeping:
            object.__setattr__(view, name, value)
    for name, param in module._parameters.items():
        view.register_parameter(name, param)
    for name, buffer in module._buffers.items():
        view.register_buffer(
            name, buffer, persistent=name not in module._non_persistent_buffers_set
        )
    for name, child in module._modules.items():
        view.add_module(name, child)
    for name, value in replaced.items():
        setattr(view, name, value)
    view.train(module.training)
    return view


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
    return shared_view(
        module,
        num_heads=num_heads,
        head_dim=head_dim,
        num_kv_heads=num_kv_heads,
        sites=Sites(),  # interventions belong to the module they were set on
    )

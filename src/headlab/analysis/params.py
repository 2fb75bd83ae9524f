"""Parameter counts: they do not depend on the number of heads, only on the projection widths.

With E = embed_dim, H heads of size D and G K/V heads (biases included):
    W_Q, b_Q: H*D*(E+1)    W_K, b_K and W_V, b_V: G*D*(E+1) each    W_O, b_O: E*(H*D) + E
With D = E/H this is 4E^2 + 4E for any H; GQA/MQA shrink only W_K and W_V.
"""

from __future__ import annotations

from torch import nn

from headlab.attention.module import MultiHeadAttention
from headlab.attention.sizes import check_divides
from headlab.limits import check_int
from headlab.results.param_rows import ParamRow


def parameter_count(module: nn.Module) -> int:
    """Number of distinct trainable scalars in ``module`` (shared parameters counted once)."""
    unique = {id(p): p for p in module.parameters() if p.requires_grad}
    return sum(p.numel() for p in unique.values())


def parameter_table(
    d_model: int, heads: list[int], kv_heads: list[int] | None = None, *, bias: bool = True
) -> list[ParamRow]:
    """Count parameters for every head count (and K/V head count) on meta tensors.

    ``kv_heads`` None means full multi-head (G = H); else every G that divides H is listed
    (1 is MQA). Raises ValueError when d_model is not divisible by a head count.
    """
    check_int("d_model", d_model)
    if not heads:
        raise ValueError("heads must list at least one head count, got none")
    for h in [*heads, *(kv_heads or [])]:
        check_int("a head count", h, high=d_model)
    for h in heads:
        check_divides("d_model", d_model, "heads", h)
    rows = []
    for h in heads:
        full = parameter_count(MultiHeadAttention(d_model, h, bias=bias, device="meta"))
        for g in kv_heads or [h]:
            if h % g:
                continue
            m = MultiHeadAttention(d_model, h, bias=bias, num_kv_heads=g, device="meta")
            w_q, w_k, w_v = m.projection_weights()
            b = int(bias)
            rows.append(
                ParamRow(
                    num_heads=h,
                    num_kv_heads=g,
                    head_dim=m.head_dim,
                    q_proj=w_q.numel() + b * w_q.shape[0],
                    kv_proj=w_k.numel() + w_v.numel() + b * (w_k.shape[0] + w_v.shape[0]),
                    out_proj=parameter_count(m.out_proj),
                    total=parameter_count(m),
                    saved_vs_full_mha=full - parameter_count(m),
                )
            )
    if not rows:
        raise ValueError(f"no K/V head count in {kv_heads} divides any head count in {heads}")
    return rows

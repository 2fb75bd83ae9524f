"""Per-head gradients: how the W_Q/W_K/W_V gradient of one head block depends on the others.

For one head (tau = 1/sqrt(d_head), P = softmax(tau Q K^T), O = P V, upstream dO):
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dO * O)),  dQ = tau dS K,  dK = tau dS^T Q
and dW_Q = [X^T dQ_1 | ... | X^T dQ_h]: block i depends only on head i's P_i, K_i, V_i and its
slice dO_i of the upstream gradient. With one head over all components, every block goes through
the one shared dS: the blocks are coupled. ``gradient_coupling`` measures exactly this.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from headlab.attention.functional import merge_heads
from headlab.attention.module import MultiHeadAttention
from headlab.results.coupling_result import CouplingMatrix, CouplingSummary, HeadGradientNorms


def _projection_grads(module: MultiHeadAttention, concat: Tensor, upstream: Tensor) -> list[Tensor]:
    """Gradients of (W_Q, W_K, W_V) for an upstream gradient on the head outputs before W_O."""
    weights = module.projection_weights()
    leaves = [module.in_proj_weight] if module.in_proj_weight is not None else list(weights)
    grads = torch.autograd.grad(concat, leaves, upstream, retain_graph=True)
    if module.in_proj_weight is not None:
        sizes = [w.shape[0] for w in weights]
        return list(grads[0].split(sizes))
    return list(grads)


def _blocks(grad: Tensor, blocks: int, name: str) -> Tensor:
    """(width, in) gradient -> (blocks, width // blocks * in), one row per head block."""
    if grad.shape[0] % blocks:
        raise ValueError(f"{name} has {grad.shape[0]} rows, not divisible by blocks={blocks}")
    return grad.reshape(blocks, -1)


def gradient_coupling(
    module: MultiHeadAttention,
    query: Tensor,
    key: Tensor | None = None,
    value: Tensor | None = None,
    *,
    blocks: int | None = None,
    seed: int = 0,
) -> np.ndarray:
    """(blocks, blocks) array: entry (i, j) is the norm of the change in the W_Q, W_K and W_V
    gradient rows of block i when only the upstream gradient of output block j changes.

    The output blocks are the ``blocks`` equal slices of the head outputs before W_O (the
    concatenation, batch, q_pos, num_heads * head_dim); ``blocks`` defaults to the module's
    head count. Exactly zero off the diagonal for a module with that many heads; with grouped
    K/V heads the K/V rows of a group are shared, so heads of one group couple.
    """
    blocks = module.num_heads if blocks is None else blocks
    width = module.num_heads * module.head_dim
    if blocks <= 0 or width % blocks:
        raise ValueError(f"blocks must divide the head output width {width}, got {blocks}")
    with torch.enable_grad():
        trace = module.trace(query, key, value)
        concat = merge_heads(trace.head_outputs)  # (batch, q_pos, head * d_head)
        gen = torch.Generator().manual_seed(seed)
        base = torch.randn(concat.shape, generator=gen, dtype=concat.dtype)
        delta = torch.randn(concat.shape, generator=gen, dtype=concat.dtype)
        base_grads = _projection_grads(module, concat, base)
        coupling = np.zeros((blocks, blocks))
        size = width // blocks
        for j in range(blocks):
            changed = base.clone()
            changed[..., j * size : (j + 1) * size] += delta[..., j * size : (j + 1) * size]
            grads = _projection_grads(module, concat, changed)
            change = sum(
                _blocks(g - g0, blocks, name).square().sum(-1)
                for g, g0, name in zip(grads, base_grads, ("W_Q", "W_K", "W_V"), strict=True)
            )
            coupling[:, j] = change.sqrt().numpy()
    return coupling


def head_gradient_norms(
    module: MultiHeadAttention,
    query: Tensor,
    key: Tensor | None = None,
    value: Tensor | None = None,
    *,
    seed: int = 0,
) -> HeadGradientNorms:
    """Per-head gradient norms for one upstream gradient N(0, 1) (seeded) on the output.

    W_K and W_V blocks are per K/V head; they are repeated over each group of query heads.
    """
    heads, kv_heads = module.num_heads, module.num_kv_heads
    with torch.enable_grad():
        trace = module.trace(query, key, value)
        gen = torch.Generator().manual_seed(seed)
        upstream = torch.randn(trace.output.shape, generator=gen, dtype=trace.output.dtype)
        w_q, w_k, w_v = _projection_grads(module, trace.output, upstream)
        (w_o,) = torch.autograd.grad(trace.output, [module.out_proj.weight], upstream)

    def norms(g: Tensor, n: int) -> np.ndarray:
        per = g.reshape(n, -1).norm(dim=-1).numpy()
        return np.repeat(per, heads // n)

    return HeadGradientNorms(
        w_q=norms(w_q, heads),
        w_k=norms(w_k, kv_heads),
        w_v=norms(w_v, kv_heads),
        w_o=norms(w_o.T.contiguous(), heads),
    )


def coupling_summary(
    *, d_model: int = 48, num_heads: int = 6, seq_len: int = 7, seed: int = 0
) -> CouplingSummary:
    """Seeded float64 module (N(0, 1/d_model) parameters) and input (1, seq_len, d_model): its
    coupling with ``num_heads`` heads (zero off the diagonal) and viewed as one head (coupled)."""
    gen = torch.Generator().manual_seed(seed)
    module = MultiHeadAttention(d_model, num_heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / d_model**0.5)
    x = torch.randn(1, seq_len, d_model, generator=gen, dtype=torch.float64)
    matrices = []
    for title, view, blocks in (
        (f"{num_heads} heads", module, None),
        ("1 head, same weights", module.with_num_heads(1), num_heads),
    ):
        matrix = gradient_coupling(view, x, blocks=blocks)
        off = np.abs(matrix[~np.eye(len(matrix), dtype=bool)])
        matrices.append(CouplingMatrix(title, matrix, float(off.max()) if off.size else 0.0))
    return CouplingSummary(d_model, num_heads, seq_len, matrices)

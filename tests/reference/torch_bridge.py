"""Bridges between headlab.MultiHeadAttention (torch) and headlab.reference (NumPy) for the tests.

The reference package may not import torch, so the torch -> NumPy conversion lives here.
Imported by this folder's test modules as ``torch_bridge`` (pytest puts the folder on sys.path).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from headlab import MultiHeadAttention
from headlab.reference import MultiHeadParams


def _arr(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().cpu().numpy().copy()


def module_arrays(mha: MultiHeadAttention, *, grad: bool = False) -> dict[str, np.ndarray | None]:
    """The module's parameters (or their .grad) by reference name: w_q, w_k, ..., b_o."""

    def get(p: torch.Tensor | None) -> torch.Tensor | None:
        return None if p is None else (p.grad if grad else p)

    q_dim, kv_dim = mha.num_heads * mha.head_dim, mha.num_kv_heads * mha.head_dim
    sizes = [q_dim, kv_dim, kv_dim]
    if mha.in_proj_weight is not None:
        w_q, w_k, w_v = get(mha.in_proj_weight).split(sizes)
    else:
        w_q, w_k, w_v = (get(p) for p in (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight))
    b = get(mha.in_proj_bias)
    b_q, b_k, b_v = (None, None, None) if b is None else b.split(sizes)
    named = {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": get(mha.out_proj.weight)}
    named |= {"b_q": b_q, "b_k": b_k, "b_v": b_v, "b_o": get(mha.out_proj.bias)}
    return {name: _arr(t) for name, t in named.items()}


def params_from_module(mha: MultiHeadAttention) -> MultiHeadParams:
    """The module's parameters as a MultiHeadParams of NumPy copies (same dtype)."""
    return MultiHeadParams(
        num_heads=mha.num_heads, num_kv_heads=mha.num_kv_heads, **module_arrays(mha)
    )


@dataclass(frozen=True)
class Config:
    """One layer configuration; sizes are distinct so that a swapped axis fails."""

    embed_dim: int = 12
    num_heads: int = 3
    head_dim: int | None = 5
    num_kv_heads: int | None = None
    kdim: int | None = None
    vdim: int | None = None
    bias: bool = True
    batch: int = 2
    q_len: int = 5
    k_len: int = 7


def make_module(cfg: Config, seed: int = 0, dtype: torch.dtype = torch.float64):
    """A batch-first headlab module with every parameter random and non-zero (biases too)."""
    gen = torch.Generator().manual_seed(seed)
    mha = MultiHeadAttention(
        cfg.embed_dim,
        cfg.num_heads,
        bias=cfg.bias,
        kdim=cfg.kdim,
        vdim=cfg.vdim,
        batch_first=True,
        dtype=dtype,
        head_dim=cfg.head_dim,
        num_kv_heads=cfg.num_kv_heads,
    )
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=dtype) * 0.5 + 0.1)
    return mha


def make_inputs(cfg: Config, seed: int = 1, dtype: torch.dtype = torch.float64):
    """Random (x_q, x_k, x_v) tensors, batch first, of the config's sizes."""
    gen = torch.Generator().manual_seed(seed)
    kdim, vdim = cfg.kdim or cfg.embed_dim, cfg.vdim or cfg.embed_dim
    x_q = torch.randn(cfg.batch, cfg.q_len, cfg.embed_dim, generator=gen, dtype=dtype)
    x_k = torch.randn(cfg.batch, cfg.k_len, kdim, generator=gen, dtype=dtype)
    x_v = torch.randn(cfg.batch, cfg.k_len, vdim, generator=gen, dtype=dtype)
    return x_q, x_k, x_v


CONFIGS = {
    "free_head_dim": Config(),
    "e_over_h": Config(embed_dim=12, num_heads=4, head_dim=None),
    "gqa": Config(num_heads=6, num_kv_heads=2, head_dim=5),
    "mqa": Config(num_heads=4, num_kv_heads=1, head_dim=3),
    "kdim_vdim": Config(kdim=11, vdim=13),
    "no_bias": Config(bias=False, num_heads=2, head_dim=7),
    "one_head": Config(num_heads=1, head_dim=None),
}


MASK_KINDS = ("none", "bool_2d", "bool_3d", "float_2d", "key_padding", "causal", "dead_row")


def make_masks(kind: str, cfg: Config, seed: int = 2) -> tuple[dict, np.ndarray | None]:
    """A mask in both formats: (torch forward kwargs, reference mask).

    The reference mask broadcasts to (batch, head, q_pos, k_pos). ``dead_row`` masks every key of
    query 1 in batch 0 (and a few other entries), the case where torch would give NaN.
    """
    gen = np.random.default_rng(seed)
    b, h, q, k = cfg.batch, cfg.num_heads, cfg.q_len, cfg.k_len
    if kind == "none":
        return {}, None
    if kind == "bool_2d":
        m = gen.random((q, k)) < 0.3
        m[:, 0] = False  # no fully masked row here
        return {"attn_mask": torch.from_numpy(m)}, m
    if kind == "bool_3d":
        m = gen.random((b, h, q, k)) < 0.4
        m[..., 2] = False
        return {"attn_mask": torch.from_numpy(m.reshape(b * h, q, k))}, m
    if kind == "float_2d":
        m = gen.normal(size=(q, k))
        m[gen.random((q, k)) < 0.2] = -np.inf
        m[:, 3] = 0.5
        return {"attn_mask": torch.from_numpy(m)}, m
    if kind == "key_padding":
        m = np.zeros((b, k), dtype=bool)
        m[0, -3:] = True
        m[1, :2] = True
        return {"key_padding_mask": torch.from_numpy(m)}, m[:, None, None, :]
    if kind == "causal":
        m = np.triu(np.ones((q, k), dtype=bool), 1)
        return {"is_causal": True}, m
    if kind == "dead_row":
        m = np.zeros((b, h, q, k), dtype=bool)
        m[0, :, 1, :] = True
        m[1, 0, 3, ::2] = True
        return {"attn_mask": torch.from_numpy(m.reshape(b * h, q, k))}, m
    raise ValueError(f"unknown mask kind {kind!r}")

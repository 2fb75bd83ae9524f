"""A layer's map from its residual stream to its heads' raw queries and keys, with the norm in
front held at each position's scale: the affine map the at-length split reads directly.

With the norm held at 1/s_p at position p, q_p = R(p) (W_Q D_p x_p + c_Q) and k_p = R(p) (W_K
D_p x_p + c_K), where D_p x = g * C(x) / s_p (C: the centring of a LayerNorm, else the
identity), c = W shift + the projection's bias, and R(p) the family's rotary at p (its own
cos and sin tables, applied to vectors; never (pos, d_head, d_head) matrices). For families
whose map is that: a scaled norm in front, no QK-norm, rotate-half rotary or none, and whose
highest score is the highest q . k: no sliding window, no ALiBi (``qk_map`` refuses others in one
line; the pair split of score_split.py covers every family).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.models.hf.plain_attention import slides, text_config


@dataclass(frozen=True)
class QKMap:
    """One layer's held map (module docstring). w_q (head, d_head, embed_dim), w_k (kv_head,
    d_head, embed_dim), g and shift (embed_dim,) the norm's, c_q (head, d_head) and c_k
    (kv_head, d_head) the constants, ``norm`` the module, ``model`` for the rotary tables."""

    w_q: Tensor
    w_k: Tensor
    g: Tensor
    shift: Tensor
    c_q: Tensor
    c_k: Tensor
    norm: object
    model: object

    @property
    def per(self) -> int:
        """Query heads per K/V head."""
        return self.w_q.shape[0] // self.w_k.shape[0]

    def held(self, x: Tensor) -> tuple[bool, Tensor]:
        """(centred, 1/s (rows,)) of the norm at the streams ``x`` (rows, embed_dim), read from
        its own output (the run protocol's ``BlockNorm.held``)."""
        with torch.no_grad():
            centred, inv_s = self.norm.held(x)
        return centred, inv_s.reshape(x.shape[0])

    def linear(self, x: Tensor, centred: bool, inv_s: Tensor) -> Tensor:
        """D x (..., embed_dim): the held norm's linear part, ``inv_s`` broadcast over x's
        leading dimensions up to the last."""
        return (x - x.mean(-1, keepdim=True) if centred else x) * self.g * inv_s[..., None]

    def transposed(self, u: Tensor, centred: bool, inv_s: Tensor) -> Tensor:
        """D^T u (..., embed_dim) = C(g * u) / s: the vector whose dot product with x is u's
        with D x (the pull-back through the held norm)."""
        out = u * self.g
        return (out - out.mean(-1, keepdim=True) if centred else out) * inv_s[..., None]

    def tables(self, positions: Tensor):
        """The rotary tables at ``positions`` (``turn``'s), None for a family without rotary."""
        return rotary_at(self.model, positions, self.w_q.shape[1], self.g.dtype)


def _bias(projection) -> Tensor | None:
    bias = getattr(projection.module, "bias", None)
    if bias is None:
        return None
    return bias.detach()[list(projection.rows)]


def _refuse_what_q_k_do_not_hold(model, block) -> None:
    """ValueError (one line) where the kernel's highest score is not the highest q . k: a
    sliding window (a module attribute, or only in the config as Mistral's) or ALiBi's bias."""
    config = getattr(model, "config", None)
    if slides(config, block.attention.module, block.index):
        raise ValueError(
            f"layer {block.index} attends through a sliding window; the at-length split reads "
            "every earlier key; split chosen pairs instead (why-attends)"
        )
    if config is not None and getattr(text_config(config), "alibi", None) is True:
        raise ValueError(
            f"layer {block.index}: ALiBi adds a bias to the scores; the at-length split reads "
            "q . k alone; split chosen pairs instead (why-attends)"
        )


def qk_map(model, block, dtype: torch.dtype) -> QKMap:
    """``block``'s held map in ``dtype``; ValueError (one line) where it is not the module
    docstring's."""
    attention = block.attention
    front = [n for n in block.norms if n.role == "attention_in"]
    if len(front) != 1 or any(n.role == "qk" for n in block.norms):
        raise ValueError(
            f"layer {block.index}: the at-length split needs one norm in front and no QK-norm; "
            "split chosen pairs instead (why-attends)"
        )
    _refuse_what_q_k_do_not_hold(model, block)
    heads, groups, d = attention.num_heads, attention.num_kv_heads, attention.head_dim
    w_q, w_k = (w.detach().to(dtype) for w in attention.query_key_weights())
    norm = front[0]
    g, shift = (t.to(dtype) for t in norm.form())
    bias_q, bias_k = _bias(attention.query), _bias(attention.key)
    c_q = w_q @ shift + (0 if bias_q is None else bias_q.to(dtype))
    c_k = w_k @ shift + (0 if bias_k is None else bias_k.to(dtype))
    return QKMap(
        w_q.view(heads, d, -1),
        w_k.view(groups, d, -1),
        g,
        shift,
        c_q.view(heads, d),
        c_k.view(groups, d),
        norm,
        model,
    )


def rotary_at(model, positions: Tensor, head_dim: int, dtype: torch.dtype):
    """(cos, sin (rows, d_rot), H (d_rot, d_rot): x @ H = rotate_half(x)) of the family's
    rotary at ``positions``; None for a family without rotary."""
    tables = getattr(model, "rotary_tables", None)
    if tables is None:
        return None
    try:
        cos, sin, rotate_half = tables(positions, head_dim)
    except ValueError as error:
        if "has none" not in str(error):
            raise
        return None
    d_rot = cos.shape[-1]
    if d_rot > head_dim or d_rot % 2:
        raise ValueError(f"rotary tables of width {d_rot} do not fit heads of {head_dim}")
    half = rotate_half(torch.eye(d_rot, dtype=torch.float64))  # row e: rotate_half(e)
    return cos.to(dtype), sin.to(dtype), half.to(dtype)


def turn(x: Tensor, rows: Tensor, tables, back: bool = False) -> Tensor:
    """R(p) x (``back``: R(p)^T x) for x (..., rows, d_head), p the position of each row;
    ``rows`` (..., rows) indexes the tables' rows. R(p) x = cos_p x + sin_p rotate_half(x),
    R(p)^T x = cos_p x + H^T (sin_p x)."""
    if tables is None:
        return x
    cos, sin, half = tables
    r = cos.shape[-1]
    c, s = cos[rows], sin[rows]  # (..., rows, d_rot)
    part = x[..., :r]
    turned = part * c + ((part * s) @ half.t() if back else (part @ half) * s)
    return torch.cat([turned, x[..., r:]], -1)


__all__ = ["QKMap", "qk_map", "rotary_at", "turn"]

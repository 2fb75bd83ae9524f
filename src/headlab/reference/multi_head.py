"""Multi-head attention over full parameters in NumPy: forward, and backward written out by hand.

Notation (torch's (out, in) weight layout): head = num_heads query heads, kv_head =
num_kv_heads, d_head = head_dim (free: need not be d_model / head), d_model = embed_dim:

    Q = X_q W_Q^T + b_Q     (batch, q_pos, head*d_head)      split into head heads of d_head
    K = X_k W_K^T + b_K     (batch, k_pos, kv_head*d_head)   split into kv_head heads
    V = X_v W_V^T + b_V     (batch, k_pos, kv_head*d_head)
    O_i = softmax(Q_i K_g^T / sqrt(d_head) + M) V_g,   g = i // (head / kv_head)  (GQA:
                                                  consecutive query heads share one K/V head)
    Z = concat_i(xi_i O_i)  (batch, q_pos, head*d_head)   xi = head_mask, 1 when not given
    Y = Z W_O^T + b_O       (batch, q_pos, d_model)

Backward, from dY (everything summed over batch and positions):

    dW_O = dY^T Z,  db_O = sum dY,  dZ = dY W_O
    d xi_i = <dZ_i, O_i>,  dO_i = xi_i dZ_i
    (dQ_i, dK_i, dV_i) = attention_backward(dO_i, ...)    (see reference/attention.py)
    dK_g = sum over the query heads i of group g of dK_i  (likewise dV_g)
    dW_Q = dQ^T X_q,  db_Q = sum dQ,  dX_q = dQ W_Q       (likewise K, V)

Row block i of dW_Q (torch layout; column block i in the X W layout) is dQ_i^T X_q: it depends only
on head i, which is why heads train independently (docs/reference.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headlab.reference.attention import attention, attention_backward


def _check_2d(name: str, w: np.ndarray, shape: tuple[int | None, int | None], what: str) -> None:
    ok = w.ndim == 2 and all(e is None or e == n for e, n in zip(shape, w.shape, strict=True))
    if not ok:
        raise ValueError(f"{name} must have shape {what}, got {w.shape}")


@dataclass(frozen=True)
class MultiHeadParams:
    """The parameters of one multi-head attention layer, torch's (out, in) layout.

    w_q: (head*d_head, d_model); w_k: (kv_head*d_head, kdim); w_v: (kv_head*d_head, vdim);
    w_o: (d_model, head*d_head); b_q: (head*d_head,); b_k, b_v: (kv_head*d_head,); b_o:
    (d_model,). Biases may be None (no bias). ``num_kv_heads`` defaults to ``num_heads``.
    Raises ValueError when the shapes, head counts or dtypes do not fit.
    """

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    num_heads: int
    num_kv_heads: int | None = None
    b_q: np.ndarray | None = None
    b_k: np.ndarray | None = None
    b_v: np.ndarray | None = None
    b_o: np.ndarray | None = None

    def __post_init__(self) -> None:
        h = self.num_heads
        if not isinstance(h, int) or h <= 0:
            raise ValueError(f"num_heads must be a positive integer, got {h!r}")
        g = h if self.num_kv_heads is None else self.num_kv_heads
        if not isinstance(g, int) or g <= 0 or h % g:
            raise ValueError(
                f"num_kv_heads must be a positive integer dividing num_heads={h}, got {g!r}"
            )
        object.__setattr__(self, "num_kv_heads", g)
        _check_2d("w_q", self.w_q, (None, None), "(num_heads * head_dim, embed_dim)")
        if self.w_q.shape[0] % h:
            raise ValueError(
                f"w_q rows must be num_heads * head_dim (divisible by num_heads={h}), "
                f"got {self.w_q.shape[0]}"
            )
        hd, gd, e = self.w_q.shape[0], g * self.head_dim, self.embed_dim
        _check_2d("w_k", self.w_k, (gd, None), f"(num_kv_heads * head_dim, kdim)=({gd}, kdim)")
        _check_2d("w_v", self.w_v, (gd, None), f"(num_kv_heads * head_dim, vdim)=({gd}, vdim)")
        _check_2d("w_o", self.w_o, (e, hd), f"(embed_dim, num_heads * head_dim)=({e}, {hd})")
        for name, b, n in (("b_q", self.b_q, hd), ("b_k", self.b_k, gd), ("b_v", self.b_v, gd)):
            if b is not None and b.shape != (n,):
                raise ValueError(f"{name} must have shape ({n},), got {b.shape}")
        if self.b_o is not None and self.b_o.shape != (e,):
            raise ValueError(f"b_o must have shape ({e},), got {self.b_o.shape}")
        dtype = self.w_q.dtype
        if not np.issubdtype(dtype, np.floating):
            raise ValueError(f"parameters must be floating point, got dtype {dtype}")
        for name, a in self._named():
            if a is not None and a.dtype != dtype:
                raise ValueError(f"{name} dtype must be {dtype} like w_q, got {a.dtype}")

    def _named(self) -> tuple[tuple[str, np.ndarray | None], ...]:
        return tuple(
            (n, getattr(self, n)) for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")
        )

    @property
    def head_dim(self) -> int:
        return self.w_q.shape[0] // self.num_heads

    @property
    def embed_dim(self) -> int:
        return self.w_q.shape[1]

    @property
    def dtype(self) -> np.dtype:
        return self.w_q.dtype


@dataclass(frozen=True)
class MultiHeadCache:
    """What the backward pass needs from the forward, and the intermediates worth looking at.

    q: (batch, head, q_pos, d_head); k, v: (batch, kv_head, k_pos, d_head);
    weights: (batch, head, q_pos, k_pos); head_outputs: (batch, head, q_pos, d_head), after the head
    mask (what W_O sees, as in AttentionTrace); head_mask: (head,) or (batch, head) or None.
    """

    x_q: np.ndarray
    x_k: np.ndarray
    x_v: np.ndarray
    params: MultiHeadParams
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    weights: np.ndarray
    head_outputs: np.ndarray
    head_mask: np.ndarray | None


@dataclass(frozen=True)
class HeadGrads:
    """Gradients of everything before W_O (from ``head_outputs_backward``).

    Each has the shape of its value: w_* and b_* as in MultiHeadParams (b_* None without bias),
    x_* as the inputs. head_mask: dL/d xi, shaped like the head mask ((head,) when none was given:
    the gradient at xi = 1); head_mask_per_example: (batch, head), the same before summing over the
    batch (Michel et al.'s importance is the mean of its absolute value).
    When x_q, x_k and x_v are one tensor (self-attention) its gradient is x_q + x_k + x_v.
    """

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    b_q: np.ndarray | None
    b_k: np.ndarray | None
    b_v: np.ndarray | None
    x_q: np.ndarray
    x_k: np.ndarray
    x_v: np.ndarray
    head_mask: np.ndarray
    head_mask_per_example: np.ndarray


@dataclass(frozen=True)
class MultiHeadGrads(HeadGrads):
    """HeadGrads plus the output projection: w_o (d_model, head*d_head), b_o (d_model,) or None."""

    w_o: np.ndarray
    b_o: np.ndarray | None


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """(batch, pos, head * d_head) -> (batch, head, pos, d_head)."""
    batch, pos, width = x.shape
    return x.reshape(batch, pos, num_heads, width // num_heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(batch, head, pos, d_head) -> (batch, pos, head * d_head)."""
    batch, heads, pos, d_head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, pos, heads * d_head)


def _check_inputs(
    x_q: np.ndarray, x_k: np.ndarray, x_v: np.ndarray, params: MultiHeadParams
) -> None:
    for name, x, width in (
        ("x_q", x_q, params.embed_dim),
        ("x_k", x_k, params.w_k.shape[1]),
        ("x_v", x_v, params.w_v.shape[1]),
    ):
        if x.ndim != 3 or x.shape[-1] != width:
            raise ValueError(f"{name} must have shape (batch, pos, {width}), got {x.shape}")
        if x.dtype != params.dtype:
            raise ValueError(
                f"{name} dtype must be {params.dtype} like the parameters, got {x.dtype}"
            )
    if x_k.shape[:2] != x_v.shape[:2] or x_k.shape[0] != x_q.shape[0]:
        raise ValueError(
            "x_q, x_k, x_v must share batch and x_k, x_v must share k_pos, got "
            f"{x_q.shape}, {x_k.shape}, {x_v.shape}"
        )


def _head_scale(head_mask: np.ndarray | None, batch: int, num_heads: int) -> np.ndarray | None:
    """head_mask (head,) or (batch, head) -> (batch|1, head, 1, 1)."""
    if head_mask is None:
        return None
    if head_mask.shape == (num_heads,):
        return head_mask.reshape(1, num_heads, 1, 1)
    if head_mask.shape == (batch, num_heads):
        return head_mask.reshape(batch, num_heads, 1, 1)
    raise ValueError(
        f"head_mask must have shape (num_heads,)=({num_heads},) or (batch, num_heads)="
        f"({batch}, {num_heads}), got {head_mask.shape}"
    )


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    y = x @ w.T
    return y if b is None else y + b


def multi_head_attention(
    x_q: np.ndarray,
    x_k: np.ndarray,
    x_v: np.ndarray,
    params: MultiHeadParams,
    mask: np.ndarray | None = None,
    head_mask: np.ndarray | None = None,
) -> tuple[np.ndarray, MultiHeadCache]:
    """Multi-head attention, batch first.

    x_q: (batch, q_pos, d_model); x_k: (batch, k_pos, kdim); x_v: (batch, k_pos, vdim), all of the
    parameters' dtype. mask: bool (True = may not attend) or additive float, broadcastable to
    (batch, head, q_pos, k_pos) (a (q_pos, k_pos) mask serves every batch and head).
    head_mask: (head,) or (batch, head) multiplier on each query head's output before W_O.
    Returns (output (batch, q_pos, d_model), cache for ``multi_head_attention_backward``).
    Raises ValueError for shapes or dtypes that do not fit.
    """
    x_q, x_k, x_v = np.asarray(x_q), np.asarray(x_k), np.asarray(x_v)
    _check_inputs(x_q, x_k, x_v, params)
    h, g = params.num_heads, params.num_kv_heads
    scale = _head_scale(head_mask, x_q.shape[0], h)
    q = split_heads(_linear(x_q, params.w_q, params.b_q), h)  # (batch, head, q_pos, d_head)
    k = split_heads(_linear(x_k, params.w_k, params.b_k), g)  # (batch, kv_head, k_pos, d_head)
    v = split_heads(_linear(x_v, params.w_v, params.b_v), g)
    # GQA: query head i reads K/V head i // (h // g); np.repeat keeps consecutive heads together.
    k_e, v_e = np.repeat(k, h // g, axis=1), np.repeat(v, h // g, axis=1)  # (batch, head, ...)
    head_out, weights = attention(q, k_e, v_e, mask)
    if scale is not None:
        head_out = head_out * scale
    out = _linear(merge_heads(head_out), params.w_o, params.b_o)  # (batch, q_pos, d_model)
    cache = MultiHeadCache(
        x_q=x_q,
        x_k=x_k,
        x_v=x_v,
        params=params,
        q=q,
        k=k,
        v=v,
        weights=weights,
        head_outputs=head_out,
        head_mask=head_mask,
    )
    return out, cache


def head_outputs_backward(d_head_outputs: np.ndarray, cache: MultiHeadCache) -> HeadGrads:
    """Gradients of everything before W_O from dL/d head_outputs (batch, head, q_pos, d_head).

    ``head_outputs`` are the per-head outputs after the head mask, the tensor W_O reads (the
    ``head_outputs`` of the cache and of headlab's AttentionTrace). Feeding a gradient that is
    non-zero in one head's block only shows which parameters that head's signal reaches.
    """
    p = cache.params
    h, g = p.num_heads, p.num_kv_heads
    batch = cache.x_q.shape[0]
    if d_head_outputs.shape != cache.head_outputs.shape:
        raise ValueError(
            f"d_head_outputs must have shape (batch, head, q_pos, d_head)="
            f"{cache.head_outputs.shape}, got {d_head_outputs.shape}"
        )
    scale = _head_scale(cache.head_mask, batch, h)
    k_e, v_e = np.repeat(cache.k, h // g, axis=1), np.repeat(cache.v, h // g, axis=1)
    raw_out = cache.weights @ v_e  # O_i before the head mask, (batch, head, q_pos, d_head)
    # d xi_i = <dZ_i, O_i>, per example first.
    per_example = np.einsum("bhqd,bhqd->bh", d_head_outputs, raw_out)
    if cache.head_mask is not None and cache.head_mask.shape == (batch, h):
        d_head_mask = per_example
    else:
        d_head_mask = per_example.sum(axis=0)
    d_raw = d_head_outputs if scale is None else d_head_outputs * scale
    dq, dk_e, dv_e = attention_backward(d_raw, cache.q, k_e, v_e, cache.weights)
    # Each K/V head collects the gradient of every query head that read it.
    k_pos = cache.k.shape[2]
    dk = dk_e.reshape(batch, g, h // g, k_pos, p.head_dim).sum(axis=2)
    dv = dv_e.reshape(batch, g, h // g, k_pos, p.head_dim).sum(axis=2)
    dq_f, dk_f, dv_f = merge_heads(dq), merge_heads(dk), merge_heads(dv)  # (batch, pos, width)
    return HeadGrads(
        w_q=np.einsum("bqf,bqe->fe", dq_f, cache.x_q),
        w_k=np.einsum("bkf,bke->fe", dk_f, cache.x_k),
        w_v=np.einsum("bkf,bke->fe", dv_f, cache.x_v),
        b_q=None if p.b_q is None else dq_f.sum(axis=(0, 1)),
        b_k=None if p.b_k is None else dk_f.sum(axis=(0, 1)),
        b_v=None if p.b_v is None else dv_f.sum(axis=(0, 1)),
        x_q=dq_f @ p.w_q,
        x_k=dk_f @ p.w_k,
        x_v=dv_f @ p.w_v,
        head_mask=d_head_mask,
        head_mask_per_example=per_example,
    )


def multi_head_attention_backward(d_out: np.ndarray, cache: MultiHeadCache) -> MultiHeadGrads:
    """Gradients of every weight, bias, input and the head mask from dL/d output.

    d_out: (batch, q_pos, d_model). When x_q, x_k and x_v were one array (self-attention), its
    gradient is ``grads.x_q + grads.x_k + grads.x_v``: the caller sums them.
    """
    p = cache.params
    expected = (*cache.head_outputs.shape[:1], cache.head_outputs.shape[2], p.embed_dim)
    if d_out.shape != expected:
        raise ValueError(
            f"d_out must have shape (batch, q_pos, d_model)={expected}, got {d_out.shape}"
        )
    z = merge_heads(cache.head_outputs)  # (batch, q_pos, head*d_head)
    d_z = d_out @ p.w_o  # (batch, q_pos, head*d_head)
    inner = head_outputs_backward(split_heads(d_z, p.num_heads), cache)
    return MultiHeadGrads(
        **vars(inner),
        w_o=np.einsum("bqe,bqf->ef", d_out, z),
        b_o=None if p.b_o is None else d_out.sum(axis=(0, 1)),
    )

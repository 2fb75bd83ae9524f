"""``MultiHeadAttention``: a drop-in for ``torch.nn.MultiheadAttention`` that shows its heads.

Same constructor, defaults, parameter names, forward signature and mask meaning as torch's module,
so state dicts load both ways. Extras (keyword-only): ``head_dim`` (free head size),
``num_kv_heads`` (GQA/MQA), ``rotary_base`` (rotary positions, as in Llama), ``causal`` (always
causal, as in a decoder), ``head_mask`` in forward, ``trace`` and ``with_num_heads``.

Notation, with E = embed_dim, H = num_heads, G = num_kv_heads, D = head_dim:
    Q = X_q W_Q^T + b_Q   (q_pos, H*D)     W_Q = in_proj_weight[:H*D]
    K = X_k W_K^T + b_K   (k_pos, G*D)     W_K = in_proj_weight[H*D : H*D+G*D]
    V = X_v W_V^T + b_V   (k_pos, G*D)     W_V = in_proj_weight[H*D+G*D:]
    out = concat_i(head_mask_i * softmax(Q_i K_g(i)^T / sqrt(D) + M) V_g(i)) W_O^T + b_O
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.init import constant_, xavier_normal_, xavier_uniform_
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from headlab.attention.functional import (
    explicit_attention,
    fused_attention,
    merge_heads,
    split_heads,
)
from headlab.attention.masks import MergedMask, merge_masks
from headlab.attention.rotary import apply_rotary
from headlab.attention.trace import AttentionTrace


def _check_positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def resolve_head_sizes(
    embed_dim: int, num_heads: int, head_dim: int | None, num_kv_heads: int | None
) -> tuple[int, int]:
    """Check a head configuration; return (head_dim, num_kv_heads) with defaults filled in."""
    _check_positive_int("embed_dim", embed_dim)
    _check_positive_int("num_heads", num_heads)
    if head_dim is None:
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim={embed_dim} is not divisible by num_heads={num_heads} "
                "(pass head_dim= to choose the head size freely)"
            )
        head_dim = embed_dim // num_heads
    _check_positive_int("head_dim", head_dim)
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    _check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
    return head_dim, num_kv_heads


class MultiHeadAttention(nn.Module):
    """Multi-head attention with torch.nn.MultiheadAttention's interface, open to inspection.

    Args are torch's (``embed_dim``, ``num_heads``, ``dropout``, ``bias``, ``add_bias_kv``,
    ``add_zero_attn``, ``kdim``, ``vdim``, ``batch_first``, ``device``, ``dtype``) plus
    ``head_dim`` (default ``embed_dim // num_heads``), ``num_kv_heads`` (default
    ``num_heads``; 1 is multi-query attention), ``rotary_base`` (rotate q and k by position after
    the projection, see ``headlab.attention.rotary``; positions start at 0 in query and key) and
    ``causal`` (every call is causal). Raises ValueError for sizes that do not fit.
    """

    __constants__: ClassVar[list[str]] = ["batch_first"]

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        head_dim: int | None = None,
        num_kv_heads: int | None = None,
        rotary_base: float | None = None,
        causal: bool = False,
    ) -> None:
        super().__init__()
        head_dim, num_kv_heads = resolve_head_sizes(embed_dim, num_heads, head_dim, num_kv_heads)
        if rotary_base is not None and (not rotary_base > 0 or head_dim % 2):
            raise ValueError(
                f"rotary_base must be > 0 with an even head_dim, got {rotary_base} and {head_dim}"
            )
        self.rotary_base = rotary_base
        self.causal = causal
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        factory = {"device": device, "dtype": dtype}
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        _check_positive_int("kdim", self.kdim)
        _check_positive_int("vdim", self.vdim)
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dropout = dropout
        self.batch_first = batch_first
        self.add_zero_attn = add_zero_attn
        q_dim, kv_dim = num_heads * head_dim, num_kv_heads * head_dim

        if self._qkv_same_embed_dim:
            packed = torch.empty(q_dim + 2 * kv_dim, embed_dim, **factory)
            self.in_proj_weight = nn.Parameter(packed)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty(q_dim, embed_dim, **factory))
            self.k_proj_weight = nn.Parameter(torch.empty(kv_dim, self.kdim, **factory))
            self.v_proj_weight = nn.Parameter(torch.empty(kv_dim, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(q_dim + 2 * kv_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(q_dim, embed_dim, bias=bias, **factory)
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty(1, 1, kv_dim, **factory))
            self.bias_v = nn.Parameter(torch.empty(1, 1, kv_dim, **factory))
        else:
            self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # torch.nn.MultiheadAttention's initialisation, step for step.
        if self._qkv_same_embed_dim:
            xavier_uniform_(self.in_proj_weight)
        else:
            xavier_uniform_(self.q_proj_weight)
            xavier_uniform_(self.k_proj_weight)
            xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            constant_(self.in_proj_bias, 0.0)
            constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            xavier_normal_(self.bias_v)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"num_kv_heads={self.num_kv_heads}, batch_first={self.batch_first}"
            + (f", rotary_base={self.rotary_base}" if self.rotary_base is not None else "")
            + (", causal=True" if self.causal else "")
        )

    # ----------------------------------------------------------------- weights by role
    def projection_weights(self) -> tuple[Tensor, Tensor, Tensor]:
        """(W_Q (H*D, E), W_K (G*D, kdim), W_V (G*D, vdim)) as views of the parameters."""
        if self._qkv_same_embed_dim:
            q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
            return self.in_proj_weight.split([q_dim, kv_dim, kv_dim])
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def projection_biases(self) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """(b_Q (H*D,), b_K (G*D,), b_V (G*D,)), or Nones without bias."""
        if self.in_proj_bias is None:
            return None, None, None
        q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return self.in_proj_bias.split([q_dim, kv_dim, kv_dim])

    # ----------------------------------------------------------------- input handling
    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> bool:
        """Validate shapes and dtypes; return whether the input is batched."""
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if query.dim() not in (2, 3):
            raise ValueError(
                "query must have 3 dims (batched) or 2 dims (unbatched), "
                f"got shape {tuple(query.shape)}"
            )
        batched = query.dim() == 3
        for name, t in (("key", key), ("value", value)):
            if t.dim() != query.dim():
                raise ValueError(
                    f"{name} must have {query.dim()} dims like query, got shape {tuple(t.shape)}"
                )
        param_dtype = self.out_proj.weight.dtype
        for name, t, width in (
            ("query", query, self.embed_dim),
            ("key", key, self.kdim),
            ("value", value, self.vdim),
        ):
            if t.shape[-1] != width:
                raise ValueError(f"{name} last dim must be {width}, got shape {tuple(t.shape)}")
            if t.dtype != param_dtype:
                raise ValueError(f"{name} dtype must be {param_dtype}, got {t.dtype}")
        if key.shape[:-1] != value.shape[:-1]:
            raise ValueError(
                f"key and value must agree in all but the last dim, got key {tuple(key.shape)} "
                f"and value {tuple(value.shape)}"
            )
        if batched:
            b = 0 if self.batch_first else 1
            if key.shape[b] != query.shape[b]:
                raise ValueError(
                    f"key batch size must be {query.shape[b]} like query, got {key.shape[b]}"
                )
        return batched

    def _to_batch_first(self, x: Tensor, batched: bool) -> Tensor:
        if not batched:
            return x.unsqueeze(0)
        return x if self.batch_first else x.transpose(0, 1)

    def _from_batch_first(self, x: Tensor, batched: bool) -> Tensor:
        if not batched:
            return x.squeeze(0)
        return x if self.batch_first else x.transpose(0, 1)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(batch, pos, E) inputs -> q (batch, H, q_pos, D), k and v (batch, G, k_pos', D).

        k_pos' = k_pos plus one column for add_bias_kv and one for add_zero_attn.
        """
        if query is key and key is value and self._qkv_same_embed_dim:
            # One packed matmul; sizes from ints, not projection_weights(): its six split() calls
            # cost more than the attention itself at small sizes (benchmarks/bench_attention.py).
            q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
            q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).split(
                [q_dim, kv_dim, kv_dim], dim=-1
            )
        else:
            w_q, w_k, w_v = self.projection_weights()
            b_q, b_k, b_v = self.projection_biases()
            q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        batch = q.shape[0]
        if self.bias_k is not None:
            k = torch.cat([k, self.bias_k.expand(batch, 1, -1)], dim=1)
            v = torch.cat([v, self.bias_v.expand(batch, 1, -1)], dim=1)
        q = split_heads(q, self.num_heads)
        k = split_heads(k, self.num_kv_heads)
        v = split_heads(v, self.num_kv_heads)
        if self.add_zero_attn:
            k = F.pad(k, (0, 0, 0, 1))
            v = F.pad(v, (0, 0, 0, 1))
        return q, k, v

    def _mask(
        self,
        *,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        batch: int,
        q_len: int,
        k_len: int,
        batched: bool,
        dtype: torch.dtype,
        device: torch.device,
    ) -> MergedMask | None:
        extra_keys = int(self.bias_k is not None) + int(self.add_zero_attn)
        return merge_masks(
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            batch=batch,
            num_heads=self.num_heads,
            q_len=q_len,
            k_len=k_len,
            extra_keys=extra_keys,
            batched=batched,
            dtype=dtype,
            device=device,
        )

    def _head_scale(self, head_mask: Tensor | None, batch: int) -> Tensor | None:
        """head_mask (head,) or (batch, head) -> (batch|1, head, 1, 1)."""
        if head_mask is None:
            return None
        if head_mask.shape == (self.num_heads,):
            return head_mask.view(1, self.num_heads, 1, 1)
        if head_mask.shape == (batch, self.num_heads):
            return head_mask.view(batch, self.num_heads, 1, 1)
        raise ValueError(
            f"head_mask must have shape (num_heads,)=({self.num_heads},) or "
            f"(batch, num_heads)=({batch}, {self.num_heads}), got {tuple(head_mask.shape)}"
        )

    # ----------------------------------------------------------------- the computation
    def _run(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: bool,
        head_mask: Tensor | None,
        explicit: bool,
    ) -> tuple[bool, Tensor, Tensor | None, tuple[Tensor, ...] | None]:
        """Shared body of forward and trace.

        Returns (batched, head_out (batch, H, q_pos, D) after the head mask, weights or None,
        (q, k, v, scores) when explicit else None).
        """
        batched = self._check_inputs(query, key, value)
        # Keep aliasing (self-attention) visible so that _project can use one packed matmul.
        xq = self._to_batch_first(query, batched)
        xk = xq if key is query else self._to_batch_first(key, batched)
        xv = xk if value is key else self._to_batch_first(value, batched)
        batch, q_len, k_len = xq.shape[0], xq.shape[1], xk.shape[1]
        q, k, v = self._project(xq, xk, xv)
        if self.rotary_base is not None:  # (batch, head, pos, D), rotated by position
            q, k = apply_rotary(q, self.rotary_base), apply_rotary(k, self.rotary_base)
        is_causal = is_causal or self.causal
        dropout_p = self.dropout if self.training else 0.0
        plain_causal = (
            is_causal
            and attn_mask is None
            and key_padding_mask is None
            and not explicit
            and self.bias_k is None
            and not self.add_zero_attn
        )
        mask = self._mask(
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal and not plain_causal,
            batch=batch,
            q_len=q_len,
            k_len=k_len,
            batched=batched,
            dtype=q.dtype,
            device=q.device,
        )
        scale = self._head_scale(head_mask, batch)
        if explicit:
            head_out, weights, scores = explicit_attention(q, k, v, mask, dropout_p=dropout_p)
            intermediates = (q, k, v, scores)
        else:
            head_out = fused_attention(q, k, v, mask, dropout_p=dropout_p, is_causal=plain_causal)
            weights, intermediates = None, None
        if scale is not None:
            head_out = head_out * scale
        return batched, head_out, weights, intermediates

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
        """torch.nn.MultiheadAttention.forward, plus ``head_mask``.

        query: (q_pos, batch, E), or (batch, q_pos, E) with batch_first, or (q_pos, E) unbatched;
        key/value likewise with k_pos and kdim/vdim. key_padding_mask: (batch, k_pos) or
        (k_pos,); attn_mask: (q_pos, k_pos) or (batch * num_heads, q_pos, k_pos); bool True =
        may not attend, float = added. head_mask: (num_heads,) or (batch, num_heads), multiplies
        each query head's output before W_O.
        Returns (output in the query's layout, weights (batch, q_pos, k_pos) averaged over heads,
        or (batch, head, q_pos, k_pos), or None when need_weights=False). With need_weights=False
        the fused kernel (scaled_dot_product_attention) does the work.
        """
        batched, head_out, weights, _ = self._run(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            is_causal=is_causal,
            head_mask=head_mask,
            explicit=need_weights,
        )
        output = self._from_batch_first(self.out_proj(merge_heads(head_out)), batched)
        if weights is None:
            return output, None
        if average_attn_weights:
            weights = weights.mean(dim=1)
        return output, weights if batched else weights.squeeze(0)

    def trace(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        *,
        head_mask: Tensor | None = None,
    ) -> AttentionTrace:
        """Run the explicit path and return every intermediate per head (see AttentionTrace).

        ``key`` and ``value`` default to ``query`` (self-attention). The trace is batch first
        with the batch dimension always present, whatever ``batch_first`` says.
        """
        key = query if key is None else key
        value = key if value is None else value
        _, head_out, weights, (q, k, v, scores) = self._run(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            is_causal=is_causal,
            head_mask=head_mask,
            explicit=True,
        )
        w_o = self.out_proj.weight.view(self.embed_dim, self.num_heads, self.head_dim)
        contributions = torch.einsum("bhqd,ehd->bhqe", head_out, w_o)
        # The output is computed as forward computes it (one matmul), not as the sum of the
        # contributions, so that trace and forward agree bit for bit; the sum agrees to rounding.
        output = self.out_proj(merge_heads(head_out))
        return AttentionTrace(
            q=q,
            k=k,
            v=v,
            scores=scores,
            weights=weights,
            head_outputs=head_out,
            contributions=contributions,
            output=output,
        )

    # ----------------------------------------------------------------- other views
    def with_num_heads(self, num_heads: int, num_kv_heads: int | None = None) -> MultiHeadAttention:
        """The same parameters (shared, not copied) viewed with ``num_heads`` heads.

        The projection widths stay: head_dim becomes (self.num_heads * self.head_dim) / num_heads.
        Without GQA the K/V heads follow the query heads; with GQA pass ``num_kv_heads``.
        Raises ValueError when the widths do not split into the asked heads.
        """
        q_dim = self.num_heads * self.head_dim
        kv_dim = self.num_kv_heads * self.head_dim
        _check_positive_int("num_heads", num_heads)
        if q_dim % num_heads:
            raise ValueError(
                f"embed_dim={q_dim} is not divisible by num_heads={num_heads}"
                if q_dim == self.embed_dim
                else f"query width num_heads*head_dim={q_dim} is not divisible by "
                f"num_heads={num_heads}"
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
        view = MultiHeadAttention.__new__(MultiHeadAttention)
        nn.Module.__init__(view)
        for name in (
            "embed_dim",
            "kdim",
            "vdim",
            "_qkv_same_embed_dim",
            "dropout",
            "batch_first",
            "add_zero_attn",
            "rotary_base",
            "causal",
        ):
            setattr(view, name, getattr(self, name))
        view.num_heads, view.head_dim, view.num_kv_heads = num_heads, head_dim, num_kv_heads
        for name, param in self._parameters.items():
            view.register_parameter(name, param)
        view.bias_k, view.bias_v = self.bias_k, self.bias_v
        view.out_proj = self.out_proj
        view.train(self.training)
        return view

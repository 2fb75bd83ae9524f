"""``MultiHeadAttention``: a drop-in for ``torch.nn.MultiheadAttention`` that shows its heads.

Same constructor, defaults, parameter names, forward signature and mask meaning as torch's module,
so state dicts load both ways, and it works as the ``self_attn`` / ``multihead_attn`` of torch's
Transformer layers (see ``headlab.attention.torch_layers``). Extras (keyword-only): ``head_dim``
(free head size), ``num_kv_heads`` (GQA/MQA), ``rotary_base`` (rotary positions, as in Llama),
``causal`` (always causal, as in a decoder), ``head_mask`` in forward, ``trace``,
``with_num_heads``, and intervention sites (``headlab.attention.interventions``).

Shapes in words: head = num_heads query heads, kv_head = num_kv_heads, d_head = head_dim,
embed_dim = the model's width (``headlab.attention.projections`` holds the projections):
    Q = X_q W_Q^T + b_Q   (q_pos, head*d_head)      W_Q = in_proj_weight[:head*d_head]
    K = X_k W_K^T + b_K   (k_pos, kv_head*d_head)   W_K = the next kv_head*d_head rows
    V = X_v W_V^T + b_V   (k_pos, kv_head*d_head)   W_V = the last kv_head*d_head rows
    out = concat_i(head_mask_i * softmax(Q_i K_g(i)^T / sqrt(d_head) + M) V_g(i)) W_O^T + b_O
with g(i) the K/V head that query head i reads.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn.init import constant_, xavier_normal_, xavier_uniform_
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from headlab.attention import layout, projections
from headlab.attention.functional import merge_heads
from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.masks import torch_mask_spec
from headlab.attention.sites import Sites
from headlab.attention.sizes import (
    check_positive_int,
    parameter_elements,
    resolve_head_sizes,
)
from headlab.attention.torch_layers import (
    forward_nested,
    fused_kernel_computes_forward,
    torch_merge_masks,
)
from headlab.attention.trace import AttentionTrace, HeadRun
from headlab.attention.views import with_num_heads
from headlab.limits import check_fits

__all__ = ["MultiHeadAttention", "resolve_head_sizes"]


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
        check_positive_int("kdim", self.kdim)
        check_positive_int("vdim", self.vdim)
        packed = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dropout = dropout
        self.batch_first = batch_first
        self.add_zero_attn = add_zero_attn
        q_dim, kv_dim = num_heads * head_dim, num_kv_heads * head_dim
        if torch.empty(0, device=device).device.type != "meta":  # meta tensors take no memory
            size = torch.finfo(dtype or torch.get_default_dtype()).bits // 8
            scalars = parameter_elements(
                embed_dim, self.kdim, self.vdim, q_dim, kv_dim, bias=bias, add_bias_kv=add_bias_kv
            )
            check_fits(
                f"MultiHeadAttention(embed_dim={embed_dim}, num_heads={num_heads}, "
                f"head_dim={head_dim}, num_kv_heads={num_kv_heads}) with {scalars:,} parameters",
                scalars * size,
                "lower embed_dim, head_dim or num_heads",
            )

        self.sites = Sites()  # interventions and observers (headlab.attention.interventions)
        if packed:
            self.in_proj_weight = nn.Parameter(
                torch.empty(q_dim + 2 * kv_dim, embed_dim, **factory)
            )
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
        if self.in_proj_weight is not None:
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
        """(W_Q (head*d_head, embed_dim), W_K (kv_head*d_head, kdim), W_V (kv_head*d_head,
        vdim)) as views of the parameters."""
        return projections.projection_weights(self)

    def query_key_weights(self) -> tuple[Tensor, Tensor]:
        """(W_Q (head*d_head, embed_dim), W_K (kv_head*d_head, kdim)): what
        ``headlab.models.interface.AttentionLayer`` asks for (rotary positions act after them)."""
        w_q, w_k, _ = projections.projection_weights(self)
        return w_q, w_k

    def projection_biases(self) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """(b_Q (head*d_head,), b_K (kv_head*d_head,), b_V (kv_head*d_head,)), or Nones."""
        return projections.projection_biases(self)

    # ----------------------------------------------------------------- torch's Transformer layers
    @property
    def _qkv_same_embed_dim(self) -> bool:
        """Read by torch's Transformer layers: True lets their fused kernel replace forward, so it
        is True only where that kernel computes the same thing (see torch_layers)."""
        return fused_kernel_computes_forward(self)

    def merge_masks(
        self, attn_mask: Tensor | None, key_padding_mask: Tensor | None, query: Tensor
    ) -> tuple[Tensor | None, int | None]:
        """torch.nn.MultiheadAttention.merge_masks (called by torch's encoder layer fast path)."""
        return torch_merge_masks(self.num_heads, attn_mask, key_padding_mask, query)

    # ----------------------------------------------------------------- the computation
    def _inputs(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[bool, Tensor, ...]:
        """Check the inputs against this module; return (batched, query, key, value), each
        batch first (batch, q_pos | k_pos, embed_dim | kdim | vdim) with the batch dimension."""
        batched = layout.check_inputs(
            query,
            key,
            value,
            widths=(self.embed_dim, self.kdim, self.vdim),
            dtype=self.out_proj.weight.dtype,
            batch_first=self.batch_first,
        )
        inputs = layout.inputs_batch_first(
            query, key, value, batched=batched, batch_first=self.batch_first
        )
        return (batched, *inputs)

    def run_heads(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: bool,
        head_mask: Tensor | None,
        need_weights: str | None,
        head_view: int | None = None,
        sites: Sites | None = None,
    ) -> HeadRun:
        """The call up to the head outputs (before W_O): the body forward and trace share, and
        what a view of this module (``HeadGroupView``) runs with its own ``head_view`` and
        ``sites``. Arguments as in ``forward``; need_weights: None, "mean" or "heads". The
        kernel (``headlab.attention.kernel.attend``) chooses the path from ``need_weights`` and
        what the sites ask (``self.sites``, or the given ``sites``)."""
        sites = self.sites if sites is None else sites
        batched, xq, xk, xv = self._inputs(query, key, value)  # (batch, q_pos|k_pos, width)
        batch = xq.shape[0]
        # (batch, head, q_pos, d_head), (batch, kv_head, k_pos', d_head) twice
        q, k, v = projections.project(self, xq, xk, xv)
        mask = torch_mask_spec(
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            always_causal=self.causal,
            batch=batch,
            num_heads=self.num_heads,
            q_len=xq.shape[1],
            k_len=xk.shape[1],
            extra_keys=int(self.bias_k is not None) + int(self.add_zero_attn),
            batched=batched,
        )
        statistics = sites.statistics
        if statistics is not None:  # contributions go through this module's W_O
            statistics = dataclasses.replace(statistics, output_weight=self.out_proj.weight)
        run = attend(
            q,
            k,
            v,
            mask,
            AttendOptions(
                dropout_p=self.dropout if self.training else 0.0,
                need_weights=need_weights,
                sites=sites,
                head_scale=layout.head_scale(head_mask, batch, self.num_heads),
                head_view=head_view,
                statistics=statistics,
            ),
        )
        return HeadRun(batched, run.head_out, run.weights, run.q, run.k, run.v, run.scores)

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

        query: (q_pos, batch, embed_dim), or (batch, q_pos, embed_dim) with batch_first, or
        (q_pos, embed_dim) unbatched; key/value likewise with k_pos and kdim/vdim.
        key_padding_mask: (batch, k_pos) or (k_pos,); attn_mask: (q_pos, k_pos) or
        (batch * head, q_pos, k_pos); bool True = may not attend, float = added. head_mask:
        (head,) or (batch, head), multiplies each query head's output before W_O.
        Returns (output in the query's layout, weights (batch, q_pos, k_pos) averaged over heads,
        or (batch, head, q_pos, k_pos), or None when need_weights=False). With need_weights=False
        the fused kernel (scaled_dot_product_attention) does the work.
        """
        if isinstance(query, Tensor) and query.is_nested:  # TransformerEncoder's nested path
            return forward_nested(
                self,
                query,
                key,
                value,
                attn_mask=attn_mask,
                key_padding_mask=key_padding_mask,
                is_causal=is_causal,
                head_mask=head_mask,
            )
        run = self.run_heads(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            is_causal=is_causal,
            head_mask=head_mask,
            need_weights=("mean" if average_attn_weights else "heads") if need_weights else None,
        )
        out = self.out_proj(merge_heads(run.head_out))  # (batch, q_pos, embed_dim)
        output = layout.from_batch_first(out, batched=run.batched, batch_first=self.batch_first)
        if not need_weights:
            return output, None
        weights = run.weights  # (batch, q_pos, k_pos) averaged, or (batch, head, q_pos, k_pos)
        return output, weights if run.batched else weights.squeeze(0)  # unbatched: no batch dim

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
        run = self.run_heads(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            is_causal=is_causal,
            head_mask=head_mask,
            need_weights="heads",
        )
        # (embed_dim, head, d_head)
        w_o = self.out_proj.weight.view(self.embed_dim, self.num_heads, self.head_dim)
        contributions = torch.einsum("bhqd,ehd->bhqe", run.head_out, w_o)
        # The output is computed as forward computes it (one matmul), not as the sum of the
        # contributions, so that trace and forward agree bit for bit; the sum agrees to rounding.
        output = self.out_proj(merge_heads(run.head_out))
        return AttentionTrace(
            q=run.q,
            k=run.k,
            v=run.v,
            scores=run.scores,
            weights=run.weights,
            head_outputs=run.head_out,
            contributions=contributions,
            output=output,
        )

    def with_num_heads(self, num_heads: int, num_kv_heads: int | None = None) -> MultiHeadAttention:
        """The same parameters (shared, not copied) viewed with ``num_heads`` heads.

        The projection widths stay: head_dim becomes (self.num_heads * self.head_dim) / num_heads.
        Without GQA the K/V heads follow the query heads; with GQA pass ``num_kv_heads``.
        Raises ValueError when the widths do not split into the asked heads.
        """
        return with_num_heads(self, num_heads, num_kv_heads)

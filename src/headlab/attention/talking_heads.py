"""Talking-heads attention (Shazeer et al. 2020): the heads' scores are mixed before and after
the softmax, so no head is optimised on its own.

With L_i = Q_i K_i^T / sqrt(d_head) (batch, head, q_pos, k_pos) for each head i:
    L'_j = sum_i pre_mix[i, j] L_i        mixed logits
    P_j  = softmax(L'_j + M)              one softmax per mixed head
    W_j  = sum_i post_mix[i, j] P_i       mixed weights (rows need not sum to one)
    O_j  = W_j V_j                        (batch, head, q_pos, d_head), then concat and W_O
With pre_mix = post_mix = identity it is plain multi-head attention on the same parameters.
The mixing adds 2 H^2 parameters; everything else is ``MultiHeadAttention``'s, with the same
names, so a plain module's state dict loads into this one (``strict=False``) and back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headlab.attention import layout
from headlab.attention.functional import merge_heads, split_heads
from headlab.attention.masks import causal_mask
from headlab.attention.module import MultiHeadAttention
from headlab.attention.trace import AttentionTrace


class TalkingHeadsAttention(MultiHeadAttention):
    """``MultiHeadAttention`` plus ``pre_mix`` and ``post_mix`` (head, head), both identity at
    construction. Supported: self- or cross-attention, batched or not, ``batch_first``,
    ``is_causal``, ``head_mask`` and a boolean ``key_padding_mask`` (batch, k_pos); not GQA,
    add_bias_kv, add_zero_attn or attn_mask (ValueError naming the option), nor the
    intervention sites of ``headlab.attention.interventions``."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs: object) -> None:
        allowed = {"num_kv_heads": (None, num_heads), "kdim": (None, embed_dim),
                   "vdim": (None, embed_dim)}  # fmt: skip
        for option in ("add_bias_kv", "add_zero_attn", "num_kv_heads", "kdim", "vdim"):
            if kwargs.get(option) not in allowed.get(option, (None, False)):
                raise ValueError(f"TalkingHeadsAttention does not support {option}")
        super().__init__(embed_dim, num_heads, **kwargs)  # type: ignore[arg-type]
        factory = {"device": self.out_proj.weight.device, "dtype": self.out_proj.weight.dtype}
        self.pre_mix = nn.Parameter(torch.eye(num_heads, **factory))
        self.post_mix = nn.Parameter(torch.eye(num_heads, **factory))

    @classmethod
    def from_plain(
        cls, plain: MultiHeadAttention, *, mix_scale: float = 0.0, seed: int = 0
    ) -> TalkingHeadsAttention:
        """A copy of ``plain``'s parameters; mixing = identity + mix_scale * N(0, 1) (seeded).
        With ``mix_scale`` 0 it computes exactly what ``plain`` does."""
        module = cls(
            plain.embed_dim,
            plain.num_heads,
            bias=plain.in_proj_bias is not None,
            batch_first=plain.batch_first,
            head_dim=plain.head_dim,
            dtype=plain.out_proj.weight.dtype,
        )
        module.load_state_dict(plain.state_dict(), strict=False)
        if mix_scale:
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for mix in (module.pre_mix, module.post_mix):
                    noise = torch.randn(mix.shape, generator=gen, dtype=torch.float64)
                    mix.add_(mix_scale * noise.to(mix.dtype))
        return module

    def _talk(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None,
        is_causal: bool,
    ) -> tuple[Tensor, ...]:
        """Batch-first inputs (batch, pos, E) -> (q, k, v, mixed scores, weights, head_out)."""
        w_q, w_k, w_v = self.projection_weights()
        b_q, b_k, b_v = self.projection_biases()
        q = split_heads(F.linear(query, w_q, b_q), self.num_heads)  # (batch, head, q_pos, D)
        k = split_heads(F.linear(key, w_k, b_k), self.num_heads)  # (batch, head, k_pos, D)
        v = split_heads(F.linear(value, w_v, b_v), self.num_heads)
        logits = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)  # (batch, head, q_pos, k_pos)
        scores = torch.einsum("bhqk,hj->bjqk", logits, self.pre_mix)
        if is_causal or self.causal:
            scores = scores.masked_fill(causal_mask(q.shape[2], k.shape[2], q.device), -torch.inf)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], -torch.inf)
        probs = scores.softmax(-1)
        weights = torch.einsum("bhqk,hj->bjqk", probs, self.post_mix)
        return q, k, v, scores, weights, weights @ v

    @property
    def _qkv_same_embed_dim(self) -> bool:
        """False: torch's fused encoder kernel knows nothing of the mixing, so torch's Transformer
        layers must call this module's forward."""
        return False

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
        """As ``MultiHeadAttention.forward`` for the supported options; weights are the mixed
        weights W (batch, head, q_pos, k_pos), averaged over heads unless told otherwise."""
        if attn_mask is not None:
            raise ValueError("TalkingHeadsAttention does not support attn_mask")
        batched, xq, xk, xv = self._inputs(query, key, value)
        *_, weights, head_out = self._talk(xq, xk, xv, key_padding_mask, is_causal)
        scale = layout.head_scale(head_mask, head_out.shape[0], self.num_heads)
        head_out = head_out if scale is None else head_out * scale
        out = self.out_proj(merge_heads(head_out))  # (batch, q_pos, E)
        out = layout.from_batch_first(out, batched=batched, batch_first=self.batch_first)
        if not need_weights:
            return out, None
        weights = weights.mean(1) if average_attn_weights else weights
        return out, weights if batched else weights.squeeze(0)

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
        """Every intermediate (see AttentionTrace); ``scores`` are the mixed logits L' and
        ``weights`` the mixed weights W."""
        if attn_mask is not None:
            raise ValueError("TalkingHeadsAttention does not support attn_mask")
        key = query if key is None else key
        value = key if value is None else value
        _, xq, xk, xv = self._inputs(query, key, value)
        q, k, v, scores, weights, head_out = self._talk(xq, xk, xv, key_padding_mask, is_causal)
        scale = layout.head_scale(head_mask, head_out.shape[0], self.num_heads)
        head_out = head_out if scale is None else head_out * scale
        w_o = self.out_proj.weight.view(self.embed_dim, self.num_heads, self.head_dim)
        return AttentionTrace(
            q=q,
            k=k,
            v=v,
            scores=scores,
            weights=weights,
            head_outputs=head_out,
            contributions=torch.einsum("bhqd,ehd->bhqe", head_out, w_o),
            output=self.out_proj(merge_heads(head_out)),
        )

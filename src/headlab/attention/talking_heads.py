"""Talking-heads attention (Shazeer et al. 2020): the heads' scores are mixed before and after
the softmax, so no head is optimised on its own.

With L_i = Q_i K_i^T / sqrt(d_head) (batch, head, q_pos, k_pos) for each head i:
    L'_j = sum_i pre_mix[i, j] L_i        mixed logits
    P_j  = softmax(L'_j + M)              one softmax per mixed head
    W_j  = sum_i post_mix[i, j] P_i       mixed weights (rows need not sum to one)
    O_j  = W_j V_j                        (batch, head, q_pos, d_head), then concat and W_O
With pre_mix = post_mix = identity it is plain multi-head attention on the same parameters. The
module is ``MultiHeadAttention`` with the two mixings at the kernel's ``logits`` and ``weights``
sites (``headlab.attention.kernel``): masks, fully masked rows (zeros) and head masks are the
kernel's.
The mixing adds 2 H^2 parameters; everything else is ``MultiHeadAttention``'s, with the same
names, so a plain module's state dict loads into this one (``strict=False``) and back.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from headlab.attention.module import MultiHeadAttention
from headlab.attention.trace import AttentionTrace


class TalkingHeadsAttention(MultiHeadAttention):
    """``MultiHeadAttention`` plus ``pre_mix`` and ``post_mix`` (head, head), both identity at
    construction. Supported: self- or cross-attention, batched or not, ``batch_first``,
    ``is_causal``, ``head_mask`` and a boolean ``key_padding_mask`` (batch, k_pos); not GQA,
    add_bias_kv, add_zero_attn or attn_mask (ValueError naming the option), nor the
    intervention sites of ``headlab.attention.interventions``."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs: object) -> None:
        allowed = {
            "num_kv_heads": (None, num_heads),
            "kdim": (None, embed_dim),
            "vdim": (None, embed_dim),
        }
        for option in ("add_bias_kv", "add_zero_attn", "num_kv_heads", "kdim", "vdim"):
            if kwargs.get(option) not in allowed.get(option, (None, False)):
                raise ValueError(f"TalkingHeadsAttention does not support {option}")
        super().__init__(embed_dim, num_heads, **kwargs)  # type: ignore[arg-type]
        factory = {"device": self.out_proj.weight.device, "dtype": self.out_proj.weight.dtype}
        self.pre_mix = nn.Parameter(torch.eye(num_heads, **factory))
        self.post_mix = nn.Parameter(torch.eye(num_heads, **factory))
        # the mixing lives at two of the kernel's sites, in every call of this module
        self.sites.add("logits", self._pre)
        self.sites.add("weights", self._post)

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

    def _pre(self, logits: Tensor) -> Tensor:
        """L'_j = sum_i pre_mix[i, j] L_i, at the kernel's logits site (before the mask)."""
        return torch.einsum("bhqk,hj->bjqk", logits, self.pre_mix)

    def _post(self, probs: Tensor) -> Tensor:
        """W_j = sum_i post_mix[i, j] P_i, at the kernel's weights site (before the values)."""
        return torch.einsum("bhqk,hj->bjqk", probs, self.post_mix)

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
        return super().forward(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
            head_mask=head_mask,
        )

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
        """Every intermediate (see AttentionTrace); ``scores`` are the mixed logits L' (mask
        added) and ``weights`` the mixed weights W."""
        if attn_mask is not None:
            raise ValueError("TalkingHeadsAttention does not support attn_mask")
        return super().trace(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            head_mask=head_mask,
        )

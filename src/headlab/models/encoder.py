"""A BERT encoder built from headlab parts: MultiHeadAttention (batch_first) in every layer.

One layer (post-norm, as BERT):
    a = MultiHeadAttention(x, x, x, key_padding_mask)          (batch, pos, E)
    x = LayerNorm(x + a)
    x = LayerNorm(x + W_2 act(W_1 x + b_1) + b_2)
Dropout is left out: the encoder is for inference and analysis.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headlab.attention import AttentionTrace, MultiHeadAttention
from headlab.attention.pruned import NoHeads
from headlab.attention.views import shared_view
from headlab.models.config import BertConfig
from headlab.models.interface import HeadMask, layer_masks


class BertEmbeddings(nn.Module):
    """Token + position + token type embeddings, then LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        e = config.hidden_size
        self.word = nn.Embedding(config.vocab_size, e)
        self.position = nn.Embedding(config.max_position_embeddings, e)
        self.token_type = nn.Embedding(config.type_vocab_size, e)
        self.norm = nn.LayerNorm(e, eps=config.layer_norm_eps)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        """(batch, pos) ids -> (batch, pos, E)."""
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word(input_ids) + self.position(pos) + self.token_type(token_type_ids)
        return self.norm(x)


class BertLayer(nn.Module):
    """One post-norm encoder layer. Built from existing modules so that views can share them."""

    def __init__(
        self,
        attention: MultiHeadAttention | NoHeads,
        attention_norm: nn.LayerNorm,
        ffn_in: nn.Linear,
        ffn_out: nn.Linear,
        ffn_norm: nn.LayerNorm,
        activation: str,
    ) -> None:
        super().__init__()
        self.attention = attention
        self.attention_norm = attention_norm
        self.ffn_in = ffn_in
        self.ffn_out = ffn_out
        self.ffn_norm = ffn_norm
        self.activation = activation

    @classmethod
    def from_config(cls, config: BertConfig) -> BertLayer:
        e, f, eps = config.hidden_size, config.intermediate_size, config.layer_norm_eps
        return cls(
            MultiHeadAttention(e, config.num_attention_heads, batch_first=True),
            nn.LayerNorm(e, eps=eps),
            nn.Linear(e, f),
            nn.Linear(f, e),
            nn.LayerNorm(e, eps=eps),
            config.hidden_act,
        )

    def with_attention(self, attention: MultiHeadAttention | NoHeads) -> BertLayer:
        """This layer with another attention block; every other module is shared, not copied."""
        return BertLayer(
            attention,
            self.attention_norm,
            self.ffn_in,
            self.ffn_out,
            self.ffn_norm,
            self.activation,
        )

    @property
    def num_heads(self) -> int:
        return self.attention.num_heads

    def _act(self, x: Tensor) -> Tensor:
        if self.activation == "relu":
            return F.relu(x)
        return F.gelu(x, approximate="tanh" if self.activation == "gelu_new" else "none")

    def _finish(self, x: Tensor, attended: Tensor) -> Tensor:
        x = self.attention_norm(x + attended)
        return self.ffn_norm(x + self.ffn_out(self._act(self.ffn_in(x))))

    def forward(self, x: Tensor, padding: Tensor | None, head_mask: Tensor | None = None) -> Tensor:
        """x: (batch, pos, E); padding: (batch, pos) bool, True = padding (may not be attended);
        head_mask: (head,) or (batch, head). Uses the fused attention path."""
        attended, _ = self.attention(
            x, x, x, key_padding_mask=padding, need_weights=False, head_mask=head_mask
        )
        return self._finish(x, attended)

    def trace(
        self, x: Tensor, padding: Tensor | None, head_mask: Tensor | None = None
    ) -> tuple[Tensor, AttentionTrace]:
        """Like forward, through the explicit path; returns (layer output, attention trace)."""
        t = self.attention.trace(x, key_padding_mask=padding, head_mask=head_mask)
        return self._finish(x, t.output), t


class BertEncoder(nn.Module):
    """Embeddings and a stack of BertLayers; the token states of a padded batch."""

    def __init__(self, config: BertConfig, layers: Sequence[BertLayer] | None = None) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        if layers is None:
            layers = [BertLayer.from_config(config) for _ in range(config.num_hidden_layers)]
        self.layers = nn.ModuleList(layers)

    def with_layers(self, layers: Sequence[BertLayer]) -> BertEncoder:
        """An encoder sharing these embeddings, with ``layers`` in place of the current ones."""
        return shared_view(self, layers=nn.ModuleList(layers))

    @property
    def heads_per_layer(self) -> list[int]:
        return [layer.num_heads for layer in self.layers]

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor,
        attention_mask: Tensor,
        head_mask: HeadMask = None,
    ) -> Tensor:
        """(batch, pos) ids and bool attention_mask (True = real token) -> (batch, pos, E).

        head_mask: an (layer, head) tensor or one (head,) / (batch, head) tensor (or None) per
        layer; multiplies each head's output before W_O.
        """
        padding = ~attention_mask
        x = self.embeddings(input_ids, token_type_ids)
        for layer, mask in zip(self.layers, layer_masks(head_mask, len(self.layers)), strict=True):
            x = layer(x, padding, mask)
        return x

    def trace(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor,
        attention_mask: Tensor,
        head_mask: HeadMask = None,
    ) -> tuple[Tensor, list[AttentionTrace]]:
        """Like forward through the explicit path; returns (states, one trace per layer)."""
        padding = ~attention_mask
        x = self.embeddings(input_ids, token_type_ids)
        traces = []
        for layer, mask in zip(self.layers, layer_masks(head_mask, len(self.layers)), strict=True):
            x, t = layer.trace(x, padding, mask)
            traces.append(t)
        return x, traces

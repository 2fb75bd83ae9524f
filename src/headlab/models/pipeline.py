"""``Encoder``: tokenizer + BertEncoder + sentence pooling, the way sentence-transformers runs it.

tokens = [CLS] text [SEP] (truncated to max_seq_length)
states = BertEncoder(tokens)                         (batch, pos, E)
embedding = pool(states over real tokens)             (batch, E), l2-normalised if configured
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.attention import AttentionTrace, MultiHeadAttention
from headlab.limits import check_int
from headlab.models.config import PoolingConfig
from headlab.models.encoder import BertEncoder
from headlab.models.interface import HeadMask
from headlab.models.native import NativeModel
from headlab.models.objectives import contrastive_objective
from headlab.models.special import positions
from headlab.models.tokenizer import Batch, TextTokenizer


@dataclass(frozen=True)
class EncoderTrace:
    """Every layer's attention intermediates for one text.

    tokens: the text's tokens, [CLS] and [SEP] included (pos of them); layers: one
    AttentionTrace per layer, batch 1 (weights (1, head, pos, pos), see AttentionTrace).
    """

    tokens: list[str]
    layers: list[AttentionTrace]


def pool(states: Tensor, attention_mask: Tensor, config: PoolingConfig) -> Tensor:
    """(batch, pos, E) states and (batch, pos) bool mask -> (batch, E) sentence embeddings."""
    if config.mode == "cls":
        out = states[:, 0]
    elif config.mode == "max":
        out = states.masked_fill(~attention_mask[..., None], float("-inf")).amax(dim=1)
    else:
        m = attention_mask[..., None].to(states.dtype)
        out = (states * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    return F.normalize(out, p=2, dim=1) if config.normalize else out


class Encoder(NativeModel):
    """A sentence encoder made of headlab parts, behind ``HeadModel``. Build one with
    ``load_encoder``.

    ``num_layers``; ``num_heads`` (the config's heads per layer); ``heads_per_layer`` (differs
    after pruning or viewing one layer with fewer heads); ``d_model``.
    """

    causal = False
    objective_kind = "contrastive"

    def __init__(
        self, model: BertEncoder, tokenizer: TextTokenizer, pooling: PoolingConfig, name: str
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.name = name
        # named from what the tokenizer adds ([CLS] -> "cls", [SEP] -> "sep"): models/special.py
        self.first_token, self.last_token = tokenizer.position_names()

    @property
    def num_layers(self) -> int:
        return len(self.model.layers)

    @property
    def num_heads(self) -> int:
        return self.model.config.num_attention_heads

    @property
    def heads_per_layer(self) -> list[int]:
        return self.model.heads_per_layer

    @property
    def d_model(self) -> int:
        return self.model.config.hidden_size

    # ------------------------------------------------------------------ HeadModel
    @property
    def kv_heads_per_layer(self) -> list[int]:
        return [layer.attention.num_kv_heads for layer in self.model.layers]

    @property
    def max_positions(self) -> int:
        return self.model.config.max_position_embeddings

    @property
    def output_width(self) -> int:
        return self.d_model

    def parameters(self):
        return self.model.parameters()

    def attention_layers(self) -> list[MultiHeadAttention]:
        return [layer.attention for layer in self.model.layers]

    def with_attention(self, replace: Mapping[int, MultiHeadAttention]) -> Encoder:
        layers = [
            layer.with_attention(replace[i]) if i in replace else layer
            for i, layer in enumerate(self.model.layers)
        ]
        return self.with_model(self.model.with_layers(layers))

    def run(self, batch: Batch, head_mask: HeadMask = None) -> Tensor:
        """(batch, E) sentence embeddings with autograd (the HeadModel name of embed_batch)."""
        return self.embed_batch(batch, head_mask)

    def trace_batch(self, batch: Batch, head_mask: HeadMask = None) -> tuple[Tensor, list]:
        """(embeddings (batch, E), one AttentionTrace per layer), explicit attention path."""
        states, traces = self.model.trace(
            batch.input_ids, batch.token_type_ids, batch.attention_mask, head_mask
        )
        return pool(states, batch.attention_mask, self.pooling), traces

    def objective(
        self, texts: list[str], head_mask: HeadMask = None, max_length: int | None = None
    ) -> Tensor:
        """In-batch InfoNCE between the halves of each text (``models.objectives``)."""
        return contrastive_objective(self, texts, head_mask, max_length=max_length or 128)

    def special_positions(self, batch: Batch) -> dict[str, Tensor]:
        """[CLS] (position 0) and [SEP] (each text's last real token), named by
        ``models.special`` from the tokenizer."""
        return positions(batch, self.first_token, self.last_token)

    def with_model(self, model: BertEncoder) -> Encoder:
        """This encoder (tokenizer, pooling, name) around another BertEncoder."""
        return Encoder(model, self.tokenizer, self.pooling, self.name)

    def with_num_heads(self, num_heads: int, layers: Sequence[int] | None = None) -> Encoder:
        """``with_head_view``: the same weights with the attention of ``layers`` (default: all)
        viewed as ``num_heads`` heads (parameters shared). Raises ValueError for a layer index
        out of range or a head count that does not divide the attention width."""
        return self.with_head_view(num_heads, layers)

    def tokenize(self, texts: list[str], max_length: int | None = None) -> Batch:
        """Encode texts, truncated to ``max_length`` tokens (default: the model's max_seq_length)
        and never more than the model's positions. ValueError when ``max_length`` < 2."""
        if max_length is None:
            return self.tokenizer(texts, self.pooling.max_seq_length)
        check_int("max_length", max_length, low=2)
        return self.tokenizer(texts, min(max_length, self.model.config.max_position_embeddings))

    def count_tokens(self, text: str) -> int:
        return self.tokenizer.count(text)

    def embed_batch(self, batch: Batch, head_mask: HeadMask = None) -> Tensor:
        """(batch, E) embeddings of a tokenised batch, with autograd (for gradients)."""
        states = self.model(batch.input_ids, batch.token_type_ids, batch.attention_mask, head_mask)
        return pool(states, batch.attention_mask, self.pooling)

    def embed(
        self,
        texts: list[str],
        batch_size: int = 32,
        *,
        max_length: int | None = None,
        head_mask: HeadMask = None,
    ) -> Tensor:
        """(n_texts, d_model) sentence embeddings, as sentence-transformers' encode gives them.

        Texts are batched by length (longest first, as sentence-transformers does) so that
        little padding is computed; the rows come back in the order of ``texts``.
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if not texts:
            return torch.zeros(0, self.d_model)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = torch.empty(len(texts), self.d_model)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                idx = order[start : start + batch_size]
                batch = self.tokenize([texts[i] for i in idx], max_length)
                out[idx] = self.embed_batch(batch, head_mask)
        return out

    def trace(
        self, text: str, *, max_length: int | None = None, head_mask: HeadMask = None
    ) -> EncoderTrace:
        """Every layer's per-head intermediates for ``text`` (explicit attention path)."""
        batch = self.tokenize([text], max_length)
        with torch.no_grad():
            _, layers = self.model.trace(
                batch.input_ids, batch.token_type_ids, batch.attention_mask, head_mask
            )
        return EncoderTrace(tokens=batch.tokens[0], layers=layers)

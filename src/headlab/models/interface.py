"""The one model interface under every head analysis (``headlab.heads``) and the report.

A model family (BERT encoder, Llama decoder, ...) is one file in ``models/`` whose model class
implements ``HeadModel``; ``heads/`` knows nothing else. Shapes use the words of
``AttentionTrace``: ``batch, pos, head, kv_head, q_pos, k_pos, d_head, embed_dim``.

Conventions:
- A ``TokenBatch`` is padded on the right; ``attention_mask`` is True on real tokens.
- ``head_mask`` is one entry per layer, each None or a (head,) / (batch, head) tensor that
  multiplies each query head's output before W_O (Michel et al.'s xi), or one (layer, head)
  tensor when every layer has the same head count.
- ``objective`` is the scalar the model is judged by on a list of texts, lower is better,
  differentiable in ``head_mask``: the next-token cross-entropy for a decoder, an in-batch
  contrastive loss between the halves of each text for a sentence encoder. Importance (Michel et
  al.) is E|d objective / d head_mask|.
- ``run`` gives (batch, pos, vocab) logits when ``causal`` (a language model) and (batch, E)
  sentence embeddings otherwise; ``heads/`` compares variants of a model through these two.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import Tensor
from torch.nn import Parameter

from headlab.attention import AttentionTrace, MultiHeadAttention

HeadMask = Sequence[Tensor | None] | Tensor | None


@dataclass(frozen=True)
class TokenBatch:
    """Token ids of a padded batch.

    input_ids: (batch, pos) int64; attention_mask: (batch, pos) bool, True on real tokens;
    tokens: each text's token strings without padding; token_type_ids: (batch, pos) int64 for
    models that have segments (BERT), else None.
    """

    input_ids: Tensor
    attention_mask: Tensor
    tokens: list[list[str]]
    token_type_ids: Tensor | None = None


@runtime_checkable
class HeadModel(Protocol):
    """What an analysis may ask of a model built from headlab's ``MultiHeadAttention``."""

    name: str
    #: True for decoders: query i sees keys 0..i only.
    causal: bool

    @property
    def num_layers(self) -> int: ...

    @property
    def heads_per_layer(self) -> list[int]:
        """Query heads of each layer (differs after pruning or collapsing)."""
        ...

    @property
    def kv_heads_per_layer(self) -> list[int]:
        """K/V heads of each layer (equal to heads_per_layer without GQA)."""
        ...

    @property
    def max_positions(self) -> int:
        """The longest input (in tokens) the model takes."""
        ...

    def parameters(self) -> Iterator[Parameter]:
        """Every parameter of the model (frozen while an analysis takes head-mask gradients)."""
        ...

    def attention_layers(self) -> list[MultiHeadAttention]:
        """Each layer's attention module, in order (the modules themselves, not copies)."""
        ...

    def with_attention(self, replace: Mapping[int, MultiHeadAttention]) -> HeadModel:
        """The same model (weights shared) with layer i's attention replaced by replace[i]."""
        ...

    def tokenize(self, texts: list[str], max_length: int | None = None) -> TokenBatch:
        """Encode texts (at least one) to a padded batch of at most ``max_length`` tokens
        (default: the model's own limit). Raises ValueError for max_length out of range."""
        ...

    def count_tokens(self, text: str) -> int:
        """The number of tokens of ``text`` as ``tokenize`` makes them, without any cut."""
        ...

    def run(self, batch: TokenBatch, head_mask: HeadMask = None) -> Tensor:
        """The model's output with autograd: (batch, pos, vocab) logits for a decoder,
        (batch, embed_dim) sentence embeddings for an encoder. Fused attention path."""
        ...

    def trace_batch(
        self, batch: TokenBatch, head_mask: HeadMask = None
    ) -> tuple[Tensor, list[AttentionTrace]]:
        """Like run through the explicit path; returns (output, one AttentionTrace per layer)."""
        ...

    def objective(
        self, texts: list[str], head_mask: HeadMask = None, max_length: int | None = None
    ) -> Tensor:
        """The scalar loss the model is judged by on ``texts`` (see the module docstring)."""
        ...

    def special_positions(self, batch: TokenBatch) -> dict[str, Tensor]:
        """Named positions each query's weight on is reported: name -> (batch,) int64 index.

        BERT: {"cls": 0, "sep": last real token}; a decoder: {"first": 0} (attention sink).
        """
        ...

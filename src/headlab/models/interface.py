"""The one model interface under every head analysis (``headlab.heads``) and the report.

Everything an analysis may ask of a model is here, typed; ``heads/``, ``report/``, ``cli/`` and
``experiments/`` use nothing else and name no model family (a conformance test runs every
analysis on a fake family made of this interface alone). Shapes use the words of
``AttentionTrace``: ``batch, pos, head, kv_head, q_pos, k_pos, d_head, embed_dim``.

Conventions:
- A ``TokenBatch`` is padded on the right; ``attention_mask`` is True on real tokens.
- ``head_mask`` is one entry per layer, each None or a (head,) / (batch, head) tensor that
  multiplies each query head's output before W_O (Michel et al.'s xi), or one (layer, head)
  tensor when every layer has the same head count.
- ``causal``: query i sees keys 0..i only (a decoder). Separately, ``objective_kind`` says what
  the model is judged by: "next-token" (``run`` gives (batch, pos, vocab) logits and
  ``objective`` is the next-token cross-entropy), "contrastive" (``run`` gives (batch, d_model)
  sentence embeddings and ``objective`` an in-batch contrastive loss between the halves of each
  text), or "none" (no objective: analyses that need one refuse). Importance (Michel et al.) is
  E|d objective / d head_mask|.
- Each layer's attention is an ``AttentionLayer``: its ``sites`` take interventions and
  statistics requests (``headlab.attention.interventions``, ``headlab.attention.streaming_sums``),
  applied by headlab's kernel in every call of that layer, whatever path it takes.
- ``special_positions`` names key positions whose weight is a statistic of its own; the name of
  the first token (position 0, where attention sinks park their weight) is ``first_token``.
- Views and edits return new models sharing the weights that do not change: ``with_head_view``
  (the same weights viewed with fewer heads), ``without_heads`` (heads removed),
  ``with_query_key_weights`` (new W_Q and W_K); a model that cannot do one raises ValueError
  saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from torch import Tensor
from torch.nn import Parameter

from headlab.attention.interventions import SitedLayer

HeadMask = Sequence[Tensor | None] | Tensor | None
ObjectiveKind = Literal["next-token", "contrastive", "none"]
OBJECTIVE_KINDS = ("next-token", "contrastive", "none")


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
class AttentionLayer(SitedLayer, Protocol):
    """One layer's attention as an analysis sees it: ``sites`` (interventions and statistics
    requests, applied in every call of this layer), ``num_heads`` and ``num_kv_heads`` (from
    ``SitedLayer``), and:"""

    head_dim: int
    embed_dim: int

    def query_key_weights(self) -> tuple[Tensor, Tensor]:
        """(W_Q (num_heads * head_dim, embed_dim), W_K (num_kv_heads * head_dim, embed_dim)),
        the projections before any rotary position or norm. ValueError where the layer's
        queries and keys are not linear maps of its input."""
        ...

    def value_output_weights(self) -> tuple[Tensor, Tensor]:
        """(W_V (num_kv_heads * head_dim, embed_dim), W_O (embed_dim, num_heads * head_dim)).
        ValueError where the values are not a linear map of the layer's input or the heads'
        output does not go through one output projection unchanged."""
        ...

    def input_scale(self) -> Tensor | None:
        """(embed_dim,) the scale g of the norm n(x) * g + b in front of the layer's
        projections, or None where they read the residual stream without one."""
        ...


@runtime_checkable
class HeadModel(Protocol):
    """What an analysis may ask of a model (see the module docstring)."""

    name: str
    causal: bool
    objective_kind: ObjectiveKind
    #: the name ``special_positions`` gives the first token
    first_token: str

    @property
    def num_layers(self) -> int: ...

    @property
    def heads_per_layer(self) -> list[int]:
        """Query heads of each layer (differs after pruning or viewing)."""
        ...

    @property
    def kv_heads_per_layer(self) -> list[int]:
        """K/V heads of each layer (equal to heads_per_layer without GQA)."""
        ...

    @property
    def max_positions(self) -> int:
        """The longest input (in tokens) the model takes."""
        ...

    @property
    def output_width(self) -> int:
        """The last dimension of ``run``'s output: the vocabulary of a language model, the
        embedding width of a sentence encoder."""
        ...

    def parameters(self) -> Iterator[Parameter]:
        """Every parameter of the model (frozen while an analysis takes head-mask gradients)."""
        ...

    def parameter_count(self) -> int:
        """Distinct parameters (tied weights once, copies made by ``without_heads`` once)."""
        ...

    def attention_layers(self) -> Sequence[AttentionLayer]:
        """Each layer's attention, in order (the layers themselves, not copies)."""
        ...

    def tokenize(self, texts: list[str], max_length: int | None = None) -> TokenBatch:
        """Encode texts (at least one) to a padded batch of at most ``max_length`` tokens
        (default: the model's own limit). Raises ValueError for max_length out of range."""
        ...

    def count_tokens(self, text: str) -> int:
        """The number of tokens of ``text`` as ``tokenize`` makes them, without any cut."""
        ...

    def run(self, batch: TokenBatch, head_mask: HeadMask = None) -> Tensor:
        """The model's output with autograd: (batch, pos, vocab) logits for "next-token",
        (batch, embed_dim) sentence embeddings for "contrastive", (batch, pos, embed_dim)
        states for "none"."""
        ...

    def objective(
        self, texts: list[str], head_mask: HeadMask = None, max_length: int | None = None
    ) -> Tensor:
        """The scalar loss the model is judged by on ``texts`` (see the module docstring);
        ValueError for a model whose ``objective_kind`` is "none"."""
        ...

    def special_positions(self, batch: TokenBatch) -> dict[str, Tensor]:
        """Named key positions whose weight each query puts on them is reported: name ->
        (batch,) int64 index; ``first_token`` is one of them (index 0)."""
        ...

    def with_head_view(self, num_heads: int, layers: Sequence[int] | None = None) -> HeadModel:
        """The same weights with the attention of ``layers`` (default: all) viewed as
        ``num_heads`` heads. ValueError for a count that does not divide a layer's heads."""
        ...

    def without_heads(self, heads: Mapping[int, Iterable[int]]) -> HeadModel:
        """The model without the given heads ({layer: [head, ...]}), removed from its weights;
        the other layers shared. ValueError where the family cannot remove heads."""
        ...

    def with_query_key_weights(self, weights: Mapping[int, tuple[Tensor, Tensor]]) -> HeadModel:
        """The model with layer i's W_Q and W_K replaced by ``weights[i]`` (shapes as
        ``AttentionLayer.query_key_weights``); everything else shared."""
        ...


@runtime_checkable
class LanguageModel(HeadModel, Protocol):
    """A model that also continues text (greedy)."""

    def generate(
        self, text: str, max_new_tokens: int = 32, on_token: Callable[[int], None] | None = None
    ) -> list[int]:
        """The ids of up to ``max_new_tokens`` new tokens (fewer at the end-of-text token)."""
        ...

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        """The text of ``ids``; ``skip_special``: without the tokenizer's special tokens
        (``<|im_end|>``), as a person reads the text."""
        ...

    def chat_prompt(self, text: str) -> str:
        """``text`` as one user turn of the model's chat template, ready for the answer;
        ValueError for a model without one."""
        ...


@dataclass(frozen=True)
class ModelOutline:
    """What a model gives, known from its config before any weight loads
    (``headlab.models.outline``): ``name``, ``causal`` and ``objective_kind`` as the loaded
    ``HeadModel`` will have them; transformers' ``config`` and, when asked for, the
    ``tokenizer`` (None: not asked, or a hub id whose files come with the load)."""

    name: str
    causal: bool
    objective_kind: ObjectiveKind
    config: object = field(default=None, compare=False, repr=False)
    tokenizer: object | None = field(default=None, compare=False, repr=False)
    max_positions: int | None = field(default=None, compare=False)  # None: not read


def gives_next_token_logits(model: HeadModel | ModelOutline) -> bool:
    """Whether ``model`` (loaded, or its outline before the load) gives (batch, pos, vocab)
    next-token logits: a language-model head on a causal stack."""
    return model.objective_kind == "next-token"


def require_next_token_logits(model: HeadModel | ModelOutline, needed_by: str) -> None:
    """ValueError naming what ``model`` lacks unless it gives next-token logits, e.g.
    "all-MiniLM-L6-v2 is an encoder without a language-model head; the induction task needs
    next-token logits" (``needed_by``: "the induction task")."""
    if gives_next_token_logits(model):
        return
    kind = "a decoder" if model.causal else "an encoder"
    raise ValueError(
        f"{model.name} is {kind} without a language-model head; {needed_by} needs next-token logits"
    )


def layer_masks(head_mask: HeadMask, num_layers: int) -> list[Tensor | None]:
    """A HeadMask as one entry per layer (None, or (head,) / (batch, head) tensors)."""
    if head_mask is None:
        return [None] * num_layers
    if len(head_mask) != num_layers:
        raise ValueError(
            f"head_mask must have one entry per layer ({num_layers}), got {len(head_mask)}"
        )
    return list(head_mask)


def check_layers(layers: Iterable[int], num_layers: int) -> list[int]:
    """``layers`` as a list, ValueError naming the first index out of range."""
    chosen = list(layers)
    for i in chosen:
        if not 0 <= i < num_layers:
            raise ValueError(f"layer must be in [0, {num_layers}), got {i}")
    return chosen

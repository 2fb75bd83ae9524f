"""``Decoder``: a causal language model built from headlab's attention and its tokenizer, behind
``HeadModel`` (and ``LanguageModel``: it generates).

tokenize(texts) -> TokenBatch (padded on the right)       ids of one text: encode(text)
logits(input_ids (batch, pos), attention_mask) -> (batch, pos, vocab)
generate(text, max_new_tokens) -> the new token ids (greedy)
trace(batch) -> (logits, one AttentionTrace per layer)
objective(batch) -> mean next-token cross-entropy over real tokens
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import torch
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer
from torch import Tensor, nn

from headlab.attention import AttentionTrace, MultiHeadAttention
from headlab.limits import check_int, check_prompt
from headlab.models.interface import HeadMask, TokenBatch
from headlab.models.native import NativeModel
from headlab.models.objectives import next_token_loss
from headlab.models.special import positions, tokenizers_names

#: The chat template of a checkpoint that carries none: one ChatML user turn.
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class DecoderConfig(Protocol):
    """What ``Decoder`` reads of its network's configuration."""

    vocab_size: int
    max_position_embeddings: int
    eos_token_id: int | None


class DecoderLayer(Protocol):
    attention: nn.Module

    def with_attention(self, attention: nn.Module) -> DecoderLayer: ...


class CausalNetwork(Protocol):
    """The network under a ``Decoder``: ids -> logits, a trace, layers that share their weights
    with a copy that has other attention modules (``with_layers``)."""

    config: DecoderConfig
    layers: Sequence[DecoderLayer]

    def __call__(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, head_mask: HeadMask = None
    ) -> Tensor: ...

    def trace(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, head_mask: HeadMask = None
    ) -> tuple[Tensor, list[AttentionTrace]]: ...

    def with_layers(self, layers: Sequence[DecoderLayer]) -> CausalNetwork: ...

    def eval(self) -> CausalNetwork: ...


class Decoder(NativeModel):
    """A causal language model built from headlab attention, and its tokenizer.

    ``chat_template``: the checkpoint's own (a Jinja template over ``messages``, rendered in a
    sandbox), or None for one ChatML user turn.
    """

    causal = True
    objective_kind = "next-token"

    def __init__(
        self,
        name: str,
        model: CausalNetwork,
        tokenizer: Tokenizer | None,
        chat_template: str | None = None,
    ) -> None:
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.chat_template = chat_template
        # named from what the tokenizer adds (none for SmolLM2: "first"): models/special.py;
        # without a tokenizer (a model run on token ids alone, as the benchmarks do) "first"
        names = tokenizers_names(tokenizer) if tokenizer is not None else ("first", None)
        self.first_token, self.last_token = names

    # ------------------------------------------------------------------ the interface
    @property
    def num_layers(self) -> int:
        return len(self.model.layers)

    @property
    def heads_per_layer(self) -> list[int]:
        return [layer.attention.num_heads for layer in self.model.layers]

    @property
    def kv_heads_per_layer(self) -> list[int]:
        return [layer.attention.num_kv_heads for layer in self.model.layers]

    @property
    def max_positions(self) -> int:
        return self.config.max_position_embeddings

    @property
    def output_width(self) -> int:
        return self.config.vocab_size

    def parameters(self):
        return self.model.parameters()

    def attention_layers(self) -> list[MultiHeadAttention]:
        return [layer.attention for layer in self.model.layers]

    def with_attention(self, replace: Mapping[int, MultiHeadAttention]) -> Decoder:
        layers = [
            layer.with_attention(replace[i]) if i in replace else layer
            for i, layer in enumerate(self.model.layers)
        ]
        network = self.model.with_layers(layers)
        return Decoder(self.name, network, self.tokenizer, self.chat_template)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no BOS added, as the model was trained)."""
        return self.tokenizer.encode(text).ids

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def tokenize(self, texts: list[str], max_length: int | None = None) -> TokenBatch:
        if not texts:
            raise ValueError("texts must hold at least one text, got none")
        limit = self.max_positions if max_length is None else max_length
        check_int("max_length", limit, low=1, high=self.max_positions)
        encodings = [self.tokenizer.encode(t) for t in texts]
        lengths = [min(len(e.ids), limit) for e in encodings]
        if min(lengths) == 0:
            raise ValueError("every text must have at least one token, got an empty text")
        pos = max(lengths)
        pad = self.config.eos_token_id or 0
        ids = torch.full((len(texts), pos), pad, dtype=torch.long)
        mask = torch.zeros((len(texts), pos), dtype=torch.bool)
        for row, (e, n) in enumerate(zip(encodings, lengths, strict=True)):
            ids[row, :n] = torch.tensor(e.ids[:n])
            mask[row, :n] = True
        # Token strings as the user wrote them (the text under each token's offsets: " cat"),
        # not the byte-level pieces ("Ġcat"); a character split over several tokens shows in each.
        tokens = [
            [text[start:end] for start, end in e.offsets[:n]]
            for text, e, n in zip(texts, encodings, lengths, strict=True)
        ]
        return TokenBatch(input_ids=ids, attention_mask=mask, tokens=tokens)

    def run(self, batch: TokenBatch, head_mask: HeadMask = None) -> Tensor:
        return self.model(batch.input_ids, batch.attention_mask, head_mask)

    def trace_batch(
        self, batch: TokenBatch, head_mask: HeadMask = None
    ) -> tuple[Tensor, list[AttentionTrace]]:
        return self.model.trace(batch.input_ids, batch.attention_mask, head_mask)

    def objective(
        self, texts: list[str], head_mask: HeadMask = None, max_length: int | None = None
    ) -> Tensor:
        """Mean cross-entropy of each real token given the ones before it (nats)."""
        batch = self.tokenize(texts, max_length)
        return next_token_loss(self.run(batch, head_mask), batch)

    def special_positions(self, batch: TokenBatch) -> dict[str, Tensor]:
        return positions(batch, self.first_token, self.last_token)

    # ------------------------------------------------------------------ language model
    def logits(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """(batch, pos) ids -> (batch, pos, vocab) next-token logits (no autograd)."""
        with torch.no_grad():
            return self.model(input_ids, attention_mask)

    def chat_prompt(self, text: str) -> str:
        """``text`` as one user turn of the model's chat template (ChatML when the checkpoint
        has none), ready for the assistant's answer."""
        template = ImmutableSandboxedEnvironment().from_string(self.chat_template or CHATML)
        messages = [{"role": "user", "content": text}]
        return template.render(messages=messages, add_generation_prompt=True)

    def generate(
        self, text: str, max_new_tokens: int = 32, on_token: Callable[[int], None] | None = None
    ) -> list[int]:
        """Greedy continuation of ``text``: the ``max_new_tokens`` new ids (fewer at EOS).
        ``on_token(n)`` after the n-th new token."""
        check_int("max_new_tokens", max_new_tokens, low=1, high=self.max_positions)
        ids = self.encode(text)
        check_prompt(len(ids), max_new_tokens, self.max_positions)
        new: list[int] = []
        for _ in range(max_new_tokens):
            logits = self.logits(torch.tensor([ids + new]))
            token = int(logits[0, -1].argmax())
            new.append(token)
            if on_token is not None:
                on_token(len(new))
            if token == self.config.eos_token_id:
                break
        return new

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special)

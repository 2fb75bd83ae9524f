"""``Decoder``: a Llama-family language model and its tokenizer, behind ``HeadModel``.

tokenize(texts) -> TokenBatch (padded on the right)       ids of one text: encode(text)
logits(input_ids (batch, pos), attention_mask) -> (batch, pos, vocab)
generate(text, max_new_tokens) -> the new token ids (greedy)
trace(batch) -> (logits, one AttentionTrace per layer)
objective(batch) -> mean next-token cross-entropy over real tokens
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor

from headlab.attention import AttentionTrace, MultiHeadAttention
from headlab.limits import check_int
from headlab.models.interface import HeadMask, TokenBatch
from headlab.models.llama import LlamaDecoder


class Decoder:
    """A causal language model built from headlab attention, and its tokenizer."""

    causal = True

    def __init__(self, name: str, model: LlamaDecoder, tokenizer: Tokenizer) -> None:
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config

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

    def parameters(self):
        return self.model.parameters()

    def attention_layers(self) -> list[MultiHeadAttention]:
        return [layer.attention for layer in self.model.layers]

    def with_attention(self, replace: Mapping[int, MultiHeadAttention]) -> Decoder:
        layers = [
            layer.with_attention(replace[i]) if i in replace else layer
            for i, layer in enumerate(self.model.layers)
        ]
        return Decoder(self.name, self.model.with_layers(layers), self.tokenizer)

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
        return {"first": torch.zeros(batch.input_ids.shape[0], dtype=torch.long)}

    # ------------------------------------------------------------------ language model
    def logits(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """(batch, pos) ids -> (batch, pos, vocab) next-token logits (no autograd)."""
        with torch.no_grad():
            return self.model(input_ids, attention_mask)

    @staticmethod
    def chat_prompt(text: str) -> str:
        """``text`` as one user turn of the ChatML template (SmolLM2-Instruct's), ready for the
        assistant's answer."""
        return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"

    def generate(
        self, text: str, max_new_tokens: int = 32, on_token: Callable[[int], None] | None = None
    ) -> list[int]:
        """Greedy continuation of ``text``: the ``max_new_tokens`` new ids (fewer at EOS).
        ``on_token(n)`` after the n-th new token."""
        check_int("max_new_tokens", max_new_tokens, low=1, high=self.max_positions)
        ids = self.encode(text)
        if not ids:
            raise ValueError("the prompt must have at least one token, got an empty text")
        if len(ids) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                f"model's {self.max_positions} positions"
            )
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

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def next_token_loss(logits: Tensor, batch: TokenBatch) -> Tensor:
    """Cross-entropy of tokens 1..n-1 of each text given the ones before (padding ignored)."""
    targets = batch.input_ids[:, 1:].masked_fill(~batch.attention_mask[:, 1:], -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100)

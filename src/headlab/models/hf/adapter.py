"""``TransformersModel``: any transformers model on headlab's attention, behind the model interface.

One adapter for every family: it reads sizes from the config and calls the model as transformers
does; the family's own code (embeddings, rotary, norms, experts, caches) runs untouched, and
every attention call goes to headlab's function (attention.py).

tokenize(texts) -> TokenBatch (padded on the right, the tokenizer's own special tokens)
run(batch) -> (batch, pos, vocab) logits for a causal model, (batch, hidden) pooled embeddings
              (mean over real tokens, or the folder's sentence-transformers pooling) otherwise
generate(text, n) -> greedy new ids, with the model's own KV cache (``model.generate``)

Not yet on this route (the next step of issue 22, with the kernel's sites and statistics):
head masks, traces, per-layer attention modules; those members raise NotImplementedError.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.limits import check_int
from headlab.models.config import PoolingConfig
from headlab.models.interface import HeadMask, TokenBatch

NOT_YET = (
    "the transformers route does not yet do {what}: it comes with the kernel's sites and "
    "statistics (issue 22, next step); use backend='headlab' where the family has one"
)


class TransformersModel:
    """A transformers ``PreTrainedModel`` (attention on headlab) and its tokenizer."""

    first_token = "first"

    def __init__(
        self,
        name: str,
        model: torch.nn.Module,
        tokenizer=None,
        causal: bool = True,
        pooling: PoolingConfig | None = None,
    ) -> None:
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.causal = causal
        self.objective_kind = "next-token" if causal else "contrastive"
        self.config = model.config.get_text_config()
        self.pooling = pooling or PoolingConfig(max_seq_length=self.max_positions)

    # ------------------------------------------------------------------ sizes
    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def heads_per_layer(self) -> list[int]:
        return [int(self.config.num_attention_heads)] * self.num_layers

    @property
    def kv_heads_per_layer(self) -> list[int]:
        kv = getattr(self.config, "num_key_value_heads", None) or self.config.num_attention_heads
        return [int(kv)] * self.num_layers

    @property
    def max_positions(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", None) or 2**20)

    @property
    def output_width(self) -> int:
        return int(self.config.vocab_size if self.causal else self.config.hidden_size)

    def parameters(self):
        return self.model.parameters()

    def parameter_count(self) -> int:
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    # ------------------------------------------------------------------ tokens
    def _need_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError(f"{self.name} has no tokenizer: pass tokenizer= to headlab.attach")
        return self.tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with the tokenizer's own special tokens."""
        return list(self._need_tokenizer()(text)["input_ids"])

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._need_tokenizer().decode(ids, skip_special_tokens=False)

    def _pad_id(self) -> int:
        tokenizer = self.tokenizer
        for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0

    def tokenize(self, texts: list[str], max_length: int | None = None) -> TokenBatch:
        tokenizer = self._need_tokenizer()
        if not texts:
            raise ValueError("texts must hold at least one text, got none")
        limit = self.max_positions if max_length is None else max_length
        check_int("max_length", limit, low=1, high=self.max_positions)
        fast = getattr(tokenizer, "is_fast", False)
        encodings = [tokenizer(t, return_offsets_mapping=fast) for t in texts]
        lengths = [min(len(e["input_ids"]), limit) for e in encodings]
        if min(lengths) == 0:
            raise ValueError("every text must have at least one token, got an empty text")
        ids = torch.full((len(texts), max(lengths)), self._pad_id(), dtype=torch.long)
        mask = torch.zeros(ids.shape, dtype=torch.bool)
        tokens = []
        for row, (text, e, n) in enumerate(zip(texts, encodings, lengths, strict=True)):
            ids[row, :n] = torch.tensor(e["input_ids"][:n])
            mask[row, :n] = True
            if fast:
                tokens.append([text[a:b] for a, b in e["offset_mapping"][:n]])
            else:
                tokens.append(tokenizer.convert_ids_to_tokens(e["input_ids"][:n]))
        return TokenBatch(input_ids=ids, attention_mask=mask, tokens=tokens)

    # ------------------------------------------------------------------ running
    def _forward(self, batch: TokenBatch) -> Tensor:
        out = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long())
        if self.causal:
            return out.logits  # (batch, pos, vocab)
        return pool(out.last_hidden_state, batch.attention_mask, self.pooling)  # (batch, hidden)

    def run(self, batch: TokenBatch, head_mask: HeadMask = None) -> Tensor:
        if head_mask is not None:
            raise NotImplementedError(NOT_YET.format(what="head masks"))
        return self._forward(batch)

    def logits(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """(batch, pos) ids -> (batch, pos, vocab) next-token logits (no autograd)."""
        if not self.causal:
            raise ValueError(f"{self.name} is not a language model (its attention is not causal)")
        with torch.no_grad():
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    def objective(
        self, texts: list[str], head_mask: HeadMask = None, max_length: int | None = None
    ) -> Tensor:
        """Mean next-token cross-entropy over real tokens (a causal model only, for now)."""
        if not self.causal:
            raise NotImplementedError(NOT_YET.format(what="an encoder's objective"))
        batch = self.tokenize(texts, max_length)
        logits = self.run(batch, head_mask)
        targets = batch.input_ids[:, 1:].masked_fill(~batch.attention_mask[:, 1:], -100)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100)

    def special_positions(self, batch: TokenBatch) -> dict[str, Tensor]:
        first = torch.zeros(batch.input_ids.shape[0], dtype=torch.long)
        if self.causal:
            return {"first": first}
        return {"first": first, "last": batch.attention_mask.sum(1) - 1}

    def trace_batch(self, batch: TokenBatch, head_mask: HeadMask = None):
        raise NotImplementedError(NOT_YET.format(what="traces"))

    def attention_layers(self):
        raise NotImplementedError(NOT_YET.format(what="per-layer attention modules"))

    def with_head_view(self, num_heads, layers=None):
        raise NotImplementedError(NOT_YET.format(what="head views"))

    def without_heads(self, heads):
        raise NotImplementedError(NOT_YET.format(what="removing heads"))

    def with_query_key_weights(self, weights):
        raise NotImplementedError(NOT_YET.format(what="new W_Q and W_K"))

    # ------------------------------------------------------------------ generation
    def chat_prompt(self, text: str) -> str:
        """``text`` as one user turn of the tokenizer's chat template (unchanged without one)."""
        tokenizer = self._need_tokenizer()
        if not getattr(tokenizer, "chat_template", None):
            return text
        turn = [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)

    def generate(
        self, text: str, max_new_tokens: int = 32, on_token: Callable[[int], None] | None = None
    ) -> list[int]:
        """Greedy continuation of ``text``: up to ``max_new_tokens`` new ids, with the model's own
        KV cache; ``on_token(n)`` after the n-th new token."""
        if not self.causal:
            raise ValueError(f"{self.name} is not a language model (its attention is not causal)")
        check_int("max_new_tokens", max_new_tokens, low=1, high=self.max_positions)
        ids = self.encode(text)
        if not ids:
            raise ValueError("the prompt must have at least one token, got an empty text")
        if len(ids) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                f"model's {self.max_positions} positions"
            )
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=self._pad_id(),
                streamer=None if on_token is None else _Counter(on_token),
            )
        return out[0, len(ids) :].tolist()


class _Counter:
    """A transformers streamer that only counts new tokens (the first ``put`` is the prompt)."""

    def __init__(self, on_token: Callable[[int], None]) -> None:
        self.on_token, self.seen, self.prompt = on_token, 0, True

    def put(self, value: Tensor) -> None:
        if self.prompt:
            self.prompt = False
            return
        self.seen += 1
        self.on_token(self.seen)

    def end(self) -> None:
        pass


def pool(states: Tensor, mask: Tensor, pooling: PoolingConfig) -> Tensor:
    """(batch, pos, hidden) token states -> (batch, hidden) by ``pooling`` over real tokens."""
    if pooling.mode == "cls":
        pooled = states[:, 0]
    elif pooling.mode == "max":
        pooled = states.masked_fill(~mask[..., None], float("-inf")).amax(1)
    else:
        weights = mask[..., None].to(states.dtype)
        pooled = (states * weights).sum(1) / weights.sum(1).clamp_min(1)
    return F.normalize(pooled, dim=-1) if pooling.normalize else pooled

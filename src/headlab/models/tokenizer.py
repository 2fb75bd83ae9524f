"""Tokenisation with the model's own ``tokenizer.json`` (``tokenizers``, not transformers)."""

from __future__ import annotations

from pathlib import Path

import torch

from headlab.models.bpe import check_token_ids, tokenizer_from_file
from headlab.models.interface import TokenBatch

Batch = TokenBatch  # the padded batch of every model (headlab.models.interface)


class TextTokenizer:
    """Encode texts as BERT does: [CLS] text [SEP], truncated to ``max_length`` tokens.

    The truncation and padding saved inside tokenizer.json are replaced: texts are truncated to
    the ``max_length`` asked for and padded to the longest text of each batch.
    """

    def __init__(self, path: Path, pad_token_id: int, vocab_size: int | None = None) -> None:
        """vocab_size: the model's; ValueError naming ``path`` when an id reaches beyond it."""
        self._tokenizer = tokenizer_from_file(path)
        if vocab_size is not None:
            check_token_ids(self._tokenizer, vocab_size, path, "config.json vocab_size")
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.pad_token_id = pad_token_id
        self._max_length: int | None = None

    def _configure(self, max_length: int) -> None:
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2 ([CLS] and [SEP]), got {max_length}")
        if self._max_length != max_length:
            self._tokenizer.enable_truncation(max_length=max_length)
            pad = self._tokenizer.id_to_token(self.pad_token_id) or "[PAD]"
            self._tokenizer.enable_padding(pad_id=self.pad_token_id, pad_token=pad)
            self._max_length = max_length

    def position_names(self) -> tuple[str, str | None]:
        """The names of the special positions (``headlab.models.special``): what the
        tokenizer adds around a text ([CLS] ... [SEP] -> "cls", "sep")."""
        from headlab.models.special import tokenizers_names

        return tokenizers_names(self._tokenizer)

    def count(self, text: str) -> int:
        """The tokens of ``text`` with [CLS] and [SEP], without any cut."""
        self._tokenizer.no_truncation()
        self._max_length = None  # the next call configures truncation again
        return len(self._tokenizer.encode(text).ids)

    def __call__(self, texts: list[str], max_length: int) -> Batch:
        """Encode ``texts`` (at least one) to a padded Batch of at most ``max_length`` tokens."""
        if not texts:
            raise ValueError("expected at least one text, got an empty list")
        self._configure(max_length)
        encodings = self._tokenizer.encode_batch(list(texts))
        return Batch(
            input_ids=torch.tensor([e.ids for e in encodings], dtype=torch.int64),
            token_type_ids=torch.tensor([e.type_ids for e in encodings], dtype=torch.int64),
            attention_mask=torch.tensor([e.attention_mask for e in encodings], dtype=torch.bool),
            tokens=[
                [t for t, m in zip(e.tokens, e.attention_mask, strict=True) if m] for e in encodings
            ],
        )

"""The reference decoder's tokenizer: a ``tokenizer.json`` read by the ``tokenizers`` library,
its ids checked against the model's vocabulary. (The GGUF tokenizer builder went with headlab's
GGUF reader: every GGUF goes through transformers now.)
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer


def tokenizer_from_file(path: Path) -> Tokenizer:
    """A ``tokenizer.json`` (Hugging Face's format); ValueError naming the file if unreadable."""
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises its own Exception subclass
        raise ValueError(f"{path}: not a readable tokenizer.json ({error})") from None


def check_token_ids(tokenizer: Tokenizer, vocab_size: int, where: str | Path, field: str) -> None:
    """ValueError naming the tokenizer (``where``) and the model's vocabulary (``field``) when
    the tokenizer can produce an id the model's embedding table does not have."""
    ids = tokenizer.get_vocab(with_added_tokens=True).values()
    largest = max(ids, default=-1)
    if largest >= vocab_size:
        raise ValueError(
            f"{where}: token ids go up to {largest}, beyond the model's vocabulary "
            f"({field}={vocab_size}: ids 0 to {vocab_size - 1})"
        )

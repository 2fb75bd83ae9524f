"""The byte-level BPE tokenizer of a decoder, from GGUF metadata or a ``tokenizer.json``.

Built with the ``tokenizers`` library: the GGUF's token list and merges become a BPE model with
GPT-2's byte-level pre-tokenizer and decoder, as transformers builds it from the same file; the
tokens the GGUF marks as control (type 3, e.g. ``<|im_start|>``) are special tokens, kept whole.
No BOS is added (SmolLM2's GGUF says ``add_bos_token = False``).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from headlab.models.fields import Unsupported

CONTROL = 3


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from bytes to printable characters (the byte-level alphabet)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\u00a1"), ord("\u00ac") + 1))
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    )
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def tokenizer_from_gguf(metadata: dict, where: str | Path) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from ``tokenizer.ggml.*`` metadata (model gpt2: byte-level)."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise Unsupported(f"{where}: expected a byte-level BPE tokenizer (gpt2), got {kind!r}")
    tokens = list(metadata.get("tokenizer.ggml.tokens") or [])
    merges = list(metadata.get("tokenizer.ggml.merges") or [])
    if not tokens or not merges:
        raise ValueError(f"{where}: the GGUF holds no token list or merges")
    alphabet = set(_bytes_to_unicode().values())
    spelling = _bytes_to_unicode()
    vocab = {
        token if set(token) <= alphabet else "".join(spelling[b] for b in token.encode()): i
        for i, token in enumerate(tokens)
    }
    pairs = [tuple(merge.split(" ", 1)) for merge in merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    types = metadata.get("tokenizer.ggml.token_type") or []
    special = [
        AddedToken(token, normalized=False, special=True)
        for token, kind_ in zip(tokens, types, strict=False)
        if int(kind_) == CONTROL and set(token) <= alphabet
    ]
    tokenizer.add_special_tokens(special)
    return tokenizer


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

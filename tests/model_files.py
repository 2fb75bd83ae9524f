"""Copies of model folders with an edited ``config.json``, for tests of malformed models.

Importable from any test module (pytest puts ``tests/`` on the path for its conftest.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def edited_copy(source: Path, copy: Path, **config_changes: object) -> Path:
    """``source`` copied to ``copy`` with ``config_changes`` merged into its config.json."""
    shutil.copytree(source, copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(config_changes)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def byte_llama(folder: Path, positions: int, *, special: str | None = None) -> Path:
    """A random Llama decoder of 2 layers x 4 query heads on 2 K/V heads, ``positions``
    positions and a byte-level tokenizer (one token a byte of UTF-8: any text has a token for
    every character, as a real model's has), saved to ``folder``. ``special``: a special token
    (id 0, the bytes after it) that the model always predicts (its final norm zeroed: every
    logit is 0 and greedy decoding takes the first id), with no end-of-text token, so that
    generation emits nothing else."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    config = transformers.LlamaConfig(
        vocab_size=256 + (special is not None),
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        num_hidden_layers=2,
        max_position_embeddings=positions,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(3)
    model = transformers.LlamaForCausalLM(config)
    if special is not None:
        with torch.no_grad():
            model.model.norm.weight.zero_()
    model.save_pretrained(folder, safe_serialization=True)
    first = 0 if special is None else 1
    vocab = {c: first + i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    if special is not None:
        vocab[special] = 0
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    if special is not None:
        tokenizer.add_special_tokens([special])
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder

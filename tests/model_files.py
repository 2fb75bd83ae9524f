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


def byte_llama(folder: Path, positions: int) -> Path:
    """A random Llama decoder of 2 layers x 4 query heads on 2 K/V heads, ``positions``
    positions and a byte-level tokenizer (one token a byte of UTF-8: any text has a token for
    every character, as a real model's has), saved to ``folder``."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=96, num_hidden_layers=2, max_position_embeddings=positions,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(3)
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder

"""The names of a model's special key positions, from its tokenizer alone (one rule, any backend).

A head's weight on the first token (where attention sinks park) and on a special token the
tokenizer appends at the end are statistics of their own (``HeadModel.special_positions``). The
same checkpoint must give the same metric names whichever backend loads it, so the names come
from what the tokenizer adds around a text, not from the code that runs the model:

    first position   the token the tokenizer puts before every text, named after it
                     ([CLS] -> "cls", <|begin_of_text|> -> "begin_of_text"); "first" when it
                     puts none (SmolLM2, GPT-2)
    last position    the token it puts after every text ([SEP] -> "sep"), each text's last real
                     token; none when it puts none

A name that would be shorter than two characters or that is already a statistic's name
("self", "prev", ...) falls back to "first" / "last".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import Tensor

from headlab.models.interface import TokenBatch

#: Statistics' own names, which a special position may not take.
RESERVED = frozenset(
    {"entropy", "max_weight", "self", "prev", "distance", "contribution_norm", "received"}
)


def added_around(with_special: Sequence, without: Sequence) -> tuple[list, list]:
    """(prefix, suffix): what an encoding ``with_special`` adds before and after the plain
    encoding ``without`` of the same text (token ids or strings)."""
    with_special, without = list(with_special), list(without)
    for start in range(len(with_special) - len(without) + 1):
        if with_special[start : start + len(without)] == without:
            return with_special[:start], with_special[start + len(without) :]
    return [], []


def _name(token: str, fallback: str) -> str:
    name = re.sub(r"[^0-9a-z]+", "_", token.lower()).strip("_")
    return fallback if len(name) < 2 or name in RESERVED else name


def position_names(prefix: Sequence[str], suffix: Sequence[str]) -> tuple[str, str | None]:
    """(the first position's name, the last position's name or None) from the token strings a
    tokenizer adds before and after a text (see the module docstring)."""
    first = _name(prefix[0], "first") if prefix else "first"
    last = _name(suffix[-1], "last") if suffix else None
    if last == first:
        last = "last"
    return first, last


def positions(batch: TokenBatch, first: str, last: str | None) -> dict[str, Tensor]:
    """name -> (batch,) int64 key index: position 0 as ``first``, each text's last real token
    as ``last`` (when the tokenizer appends a special token)."""
    named = {first: torch.zeros(batch.input_ids.shape[0], dtype=torch.long)}
    if last is not None:
        named[last] = batch.attention_mask.sum(dim=1) - 1
    return named

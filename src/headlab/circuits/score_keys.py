"""Which keys a score split explains: the attended key, the top-k, a pattern's key, or all.

``KeySpec.parse("top-3")`` checks the words before anything loads (ValueError, one line):

    attended     the key the head gives the most weight (its highest score)
    top-K        the K highest-scoring keys (K >= 1)
    induction    the token after the previous occurrence of the query's token
    previous     the key just before the query
    bos          the first position
    self         the query's own position
    all          every key the query sees
    N            key position N (an integer; a causal model refuses one after the query)

and, made by code that knows where they are (an image's class token, registers, a patch:
image_keys.py), ``KeySpec.at(positions, label)``: the positions given, named ``label``.

``keys_for(spec, ids, query, scores)`` gives the positions for one query row, ``scores`` the
head's (k_pos,) scores of that row (needed by "attended" and "top-K" only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

PATTERNS = ("attended", "induction", "previous", "bos", "self", "all")


@dataclass(frozen=True)
class KeySpec:
    kind: str  # a pattern, "top", "position" or "positions"
    count: int = 1  # top-K's K, or the key position
    positions: tuple[int, ...] = ()  # "positions": the keys
    label: str = ""  # "positions": their name

    @staticmethod
    def at(positions: Sequence[int], label: str) -> KeySpec:
        """The keys at ``positions`` (at least one), named ``label`` ("cls", "registers")."""
        if not positions:
            raise ValueError(f"--keys {label} names no key")
        return KeySpec("positions", positions=tuple(int(p) for p in positions), label=label)

    @staticmethod
    def parse(text: str) -> KeySpec:
        word = text.strip().lower()
        if word in PATTERNS:
            return KeySpec(word)
        if word.startswith("top-"):
            number = word[4:]
            if not number.lstrip("-").isdigit() or int(number) <= 0:
                raise ValueError(f"--keys top-K needs K >= 1, got {text!r}")
            return KeySpec("top", int(number))
        if word.isdigit():
            return KeySpec("position", int(word))
        raise ValueError(
            f"--keys must be one of {', '.join(PATTERNS)}, top-K or a key position, got {text!r}"
        )

    def name(self) -> str:
        if self.kind == "positions":
            return self.label
        if self.kind == "top":
            return f"top-{self.count}"
        return str(self.count) if self.kind == "position" else self.kind

    def needs_scores(self) -> bool:
        return self.kind in ("attended", "top")


def check_key(query: int, key: int, length: int, causal: bool) -> None:
    """ValueError (one line) for a key outside the text or after the query in a causal model."""
    if not 0 <= key < length:
        raise ValueError(f"key position must lie in 0..{length - 1}, got {key}")
    if causal and key > query:
        raise ValueError(
            f"key {key} comes after query {query}: a causal model's query sees no later key"
        )


def keys_for(
    spec: KeySpec, ids: list[int], query: int, scores: Tensor | None = None, causal: bool = True
) -> list[int]:
    """The key positions ``spec`` names for ``query`` in the text ``ids`` (ValueError, one
    line, where it names none)."""
    last = query if causal else len(ids) - 1
    if spec.kind == "position":
        check_key(query, spec.count, len(ids), causal)
        return [spec.count]
    if spec.kind == "positions":
        for key in spec.positions:
            check_key(query, key, len(ids), causal)
        return list(spec.positions)
    if spec.kind in ("attended", "top"):
        if scores is None:
            raise ValueError(f"--keys {spec.name()} needs the head's scores")
        seen = scores[: last + 1]
        count = 1 if spec.kind == "attended" else min(spec.count, seen.shape[0])
        return [int(i) for i in seen.topk(count).indices]
    if spec.kind == "all":
        return list(range(last + 1))
    if spec.kind == "bos":
        return [0]
    if spec.kind == "self":
        return [query]
    if spec.kind == "previous":
        if query == 0:
            raise ValueError("--keys previous names no key for the query at position 0")
        return [query - 1]
    earlier = [t for t in range(query) if ids[t] == ids[query] and t + 1 <= query]
    if not earlier:
        raise ValueError(
            f"--keys induction names no key for query {query}: its token does not occur before it"
        )
    return [earlier[-1] + 1]


__all__ = ["PATTERNS", "KeySpec", "check_key", "keys_for"]

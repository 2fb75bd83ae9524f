"""Where a text repeats an earlier passage: copy positions, and a long-range copy task built in.

A query position q is a copy position when the ``min_match`` tokens ending at q occurred exactly
once before (ending at j < q, so the source is unambiguous) and the token after them repeats too
(ids[j + 1] == ids[q + 1]): a model that copies predicts ids[q + 1] from position j + 1, the
*source* of q. Wu et al. (2024) call a head a retrieval head when, at such positions, its largest
weight falls on the source of the token the model is about to emit.

``copy_task`` builds such a text for a model that has none of its own: a passage of seeded
random words placed early in a long filler (the standard library's docstrings,
``headlab.models.long_document``) and repeated at the end, cut so that the whole text fits in
``n_tokens`` of the model's tokens. The passage has ``PASSAGE_WORDS`` words, or fewer (down to
``MIN_PASSAGE_WORDS``) where its two copies would take more than half of ``n_tokens``: a
model with a short context gets a shorter passage rather than a refusal. ``part`` of
``parts`` takes the filler from one of ``parts`` disjoint slices of that document: texts
built from different parts share no filler word (a calibration text and a held-out one,
``heads.kv_budget``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.limits import check_int
from headlab.models.corpus import long_document
from headlab.models.interface import HeadModel
from headlab.results.head_roles import MIN_MATCH

PASSAGE_WORDS = 48  # the built-in passage, where the context holds it twice in half its tokens
MIN_PASSAGE_WORDS = 8  # the shortest passage a short context gets


def copy_sources(ids: Tensor, min_match: int = MIN_MATCH) -> Tensor:
    """ids (pos,) int64 -> (pos,) int64: at each copy position q, the key position j + 1 of the
    source of the next token (see the module docstring); -1 elsewhere."""
    check_int("min_match", min_match)
    tokens = ids.tolist()
    sources = [-1] * len(tokens)
    seen: dict[tuple[int, ...], int] = {}  # n-gram -> its end position, or -2 when ambiguous
    for q in range(min_match - 1, len(tokens)):
        gram = tuple(tokens[q - min_match + 1 : q + 1])
        j = seen.get(gram)
        if j is not None and j >= 0 and q + 1 < len(tokens) and tokens[j + 1] == tokens[q + 1]:
            sources[q] = j + 1
        seen[gram] = q if j is None else -2
    return torch.tensor(sources, dtype=torch.long)


@dataclass(frozen=True)
class CopyTask:
    """A long text with one passage repeated: ``text``; the passage's word count; where it was
    put (the filler words before its first occurrence); the filler: ``filler_words`` words of
    ``long_document().split()`` read from index ``filler_start`` on, wrapping around within
    the slice [``slice_start``, ``slice_stop``) of the document's words."""

    text: str
    passage_words: int
    offset_words: int
    filler_start: int = 0
    filler_words: int = 0
    slice_start: int = 0
    slice_stop: int = 0

    def filler_positions(self) -> set[int]:
        """The indices into ``long_document().split()`` of every filler word of the text."""
        size = self.slice_stop - self.slice_start
        first = self.filler_start - self.slice_start
        return {self.slice_start + (first + i) % size for i in range(self.filler_words)}


def copy_task(
    model: HeadModel,
    n_tokens: int,
    *,
    passage_words: int | None = None,
    at: float = 0.1,
    seed: int = 0,
    part: int = 0,
    parts: int = 1,
) -> CopyTask:
    """A text of at most ``n_tokens`` tokens of ``model``: filler, a passage of
    ``passage_words`` seeded random words at the share ``at`` of the text, more filler, the
    passage again at the end. ``passage_words`` None: ``PASSAGE_WORDS``, or the most words from
    ``MIN_PASSAGE_WORDS`` up whose two copies (and one filler word) take at most half of
    ``n_tokens``, so that at least half the text lies between and around them. The filler
    comes from slice ``part`` of ``parts`` equal slices of the document (the text is shorter
    than ``n_tokens`` when the slice runs out); the seed picks the passage and where in the
    slice the filler begins (another part draws another passage). ValueError when
    ``n_tokens`` cannot hold the passage twice (the shortest one, when none was asked) or
    ``part`` is not below ``parts``."""
    check_int("n_tokens", n_tokens, low=2, high=model.max_positions)
    if passage_words is not None:
        check_int("passage_words", passage_words)
    check_int("parts", parts)
    check_int("part", part, low=0, high=parts - 1)
    document = long_document().split()
    rng = random.Random(seed if parts == 1 else f"copy task {seed}, part {part} of {parts}")
    vocabulary = sorted({w.strip(".,;:()'\"`") for w in document} - {""})
    drawn = [rng.choice(vocabulary) for _ in range(passage_words or PASSAGE_WORDS)]
    lo, hi = part * len(document) // parts, (part + 1) * len(document) // parts
    filler = document[lo:hi]
    start = rng.randrange(len(filler) // 2)  # where in the slice this seed begins
    words = filler[start:] + filler[:start]

    def build(count: int, size: int) -> CopyTask:
        passage = " ".join(drawn[:size])
        before = max(1, int(count * at))
        body = words[:count]
        text = " ".join([*body[:before], passage, *body[before:], passage])
        return CopyTask(text, size, before, lo + start, count, lo, hi)

    def tokens(size: int) -> int:
        return model.count_tokens(build(1, size).text)

    if passage_words is None:
        sizes = range(PASSAGE_WORDS, MIN_PASSAGE_WORDS - 1, -1)
        passage_words = next((n for n in sizes if tokens(n) <= n_tokens // 2), None)
        if passage_words is None:
            raise ValueError(
                f"n_tokens={n_tokens} cannot hold the built-in copy task: its shortest passage "
                f"({MIN_PASSAGE_WORDS} words) twice takes {tokens(MIN_PASSAGE_WORDS)} tokens, "
                f"more than half of {n_tokens}"
            )
    elif tokens(passage_words) > n_tokens:
        raise ValueError(
            f"n_tokens={n_tokens} cannot hold a passage of {passage_words} words twice "
            f"({tokens(passage_words)} tokens); use more tokens or fewer passage_words"
        )
    low, high = 1, len(words)
    while low < high:  # the most filler words that still fit
        mid = (low + high + 1) // 2
        if model.count_tokens(build(mid, passage_words).text) <= n_tokens:
            low = mid
        else:
            high = mid - 1
    return build(low, passage_words)


def context_copy_task(
    model: HeadModel, n_tokens: int | None, hint: str, **options: object
) -> CopyTask:
    """``copy_task`` at ``n_tokens``, or at the model's whole context when None; then a context
    too short is named as the model's (not as a length the caller did not pass), followed by
    ``hint`` (what to give instead)."""
    if n_tokens is not None:
        return copy_task(model, n_tokens, **options)
    n_tokens = model.max_positions
    try:
        return copy_task(model, n_tokens, **options)
    except ValueError:
        shortest = f"its shortest passage ({MIN_PASSAGE_WORDS} words) twice"
        raise ValueError(
            f"{model.name}'s context of {n_tokens} tokens cannot hold the built-in copy task "
            f"({shortest} takes more than half of it); {hint}"
        ) from None

"""The built-in tasks of ``circuits.tasks`` (see there for what each measures), in a tokenizer's
own tokens: induction, the long-range copy task, IOI and greater-than. Each returns
``TaskPairs`` with clean and corrupted of equal length; shapes ``batch, pos``."""

from __future__ import annotations

import random

import torch
from torch import Tensor

from headlab.circuits.clean_corrupted import TaskPairs, last_position_answers

#: Common first names; IOI uses those the tokenizer writes as one token after a space.
NAMES = (
    "Mary",
    "John",
    "Alice",
    "Bob",
    "Tom",
    "James",
    "Michael",
    "David",
    "Sarah",
    "Emma",
    "Anna",
    "Paul",
    "Mark",
    "Peter",
    "Lisa",
    "Kate",
    "Jack",
    "Sam",
    "Ben",
    "Dan",
    "Max",
    "Adam",
    "Eric",
    "Ryan",
    "Jason",
    "Kevin",
    "Brian",
    "Steve",
    "Laura",
    "Rose",
    "Grace",
    "Amy",
    "Helen",
    "Jane",
    "Lucy",
    "Ruth",
    "Ann",
    "Joe",
    "Tim",
    "Jim",
    "Bill",
    "Fred",
    "George",
    "Henry",
    "Frank",
    "Carl",
    "Alex",
    "Chris",
    "Matt",
    "Nick",
    "Luke",
    "Sean",
    "Ian",
    "Scott",
    "Andrew",
    "Robert",
    "Thomas",
    "Daniel",
    "Jennifer",
    "Susan",
    "Linda",
    "Karen",
    "Nancy",
    "Emily",
)
#: Templates of Wang et al. (2022): {A} and {B} are the two names of the first clause (IO and S
#: in either order), {C} the subject of the second (S in clean texts).
IOI_TEMPLATES = (
    "When {A} and {B} went to the {place}, {C} gave a {thing} to",
    "Then, {A} and {B} went to the {place}. {C} gave a {thing} to",
    "After {A} and {B} went to the {place}, {C} gave a {thing} to",
    "While {A} and {B} were working at the {place}, {C} gave a {thing} to",
)
PLACES = ("store", "park", "school", "garden", "office", "station")
THINGS = ("drink", "book", "ring", "bag", "letter", "gift")
#: Hanna et al. (2023): nouns of events with a duration.
GT_NOUNS = ("war", "expedition", "project", "reign", "journey", "strike", "dynasty", "contract")
GT_TEMPLATE = "The {noun} lasted from the year 17{yy:02d} to the year 17"
GT_CORRUPTED_YY = 1
ATTEMPTS = 50


def _encode(tokenizer, text: str, special: bool = True) -> list[int]:
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def plain_ids(tokenizer) -> Tensor:
    """(n,) int64: every id of the tokenizer that is not a special token."""
    special = set(tokenizer.all_special_ids)
    return torch.tensor([i for i in range(len(tokenizer)) if i not in special], dtype=torch.long)


def _bos(tokenizer) -> list[int]:
    bos = tokenizer.bos_token_id
    return [] if bos is None else [int(bos)]


def induction(tokenizer, n: int, length: int, seed: int) -> TaskPairs:
    """BOS + r + r against BOS + r' + r: r, r' ``length`` distinct random ordinary tokens each
    (seeded); the metric reads the second half's next tokens (log-probability)."""
    pool = plain_ids(tokenizer)
    if length > len(pool):
        raise ValueError(
            f"length must be at most {len(pool)} (the tokenizer's ordinary tokens, "
            f"none repeated in r), got {length}"
        )
    generator = torch.Generator().manual_seed(seed)

    def draw() -> Tensor:  # (n, length)
        return torch.stack(
            [pool[torch.randperm(len(pool), generator=generator)[:length]] for _ in range(n)]
        )

    r, r_other = draw(), draw()
    bos = torch.tensor(_bos(tokenizer), dtype=torch.long).expand(n, -1)
    clean = torch.cat([bos, r, r], 1)  # (batch, pos)
    corrupted = torch.cat([bos, r_other, r], 1)
    start = bos.shape[1] + length  # the second half's first position
    mask = torch.zeros(clean.shape, dtype=torch.bool)
    mask[:, start : clean.shape[1] - 1] = True
    answers = torch.zeros_like(clean)
    answers[:, :-1] = clean[:, 1:]
    answers[~mask] = 0
    return TaskPairs(
        "induction", "logprob", clean, corrupted, mask, answers, pad_id=_pad(tokenizer)
    )


def copy(model, tokenizer, n: int, length: int, seed: int) -> TaskPairs:
    """The long-range copy task (``heads.repeats.copy_task``, seeds ``seed`` ..), cut to one
    length (filler after the first token); corrupted: the first occurrence of the passage (the
    sources of the copied tokens and the ``MIN_MATCH`` tokens before them) replaced by random
    ordinary tokens; the metric reads the copy positions of the passage's repetition at the end."""
    from headlab.heads.repeats import copy_sources, copy_task
    from headlab.results.head_roles import MIN_MATCH

    texts = [copy_task(model, length, seed=seed + i) for i in range(n)]
    ids = [model.tokenize([t.text], max_length=length).input_ids[0] for t in texts]
    shortest = min(len(row) for row in ids)
    keep = 1 if _bos(tokenizer) and all(int(row[0]) == _bos(tokenizer)[0] for row in ids) else 0
    clean = torch.stack([torch.cat([row[:keep], row[keep + len(row) - shortest :]]) for row in ids])
    corrupted = clean.clone()
    mask = torch.zeros(clean.shape, dtype=torch.bool)
    pool = plain_ids(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    for row, task in enumerate(texts):
        passage = " ".join(task.text.split()[-task.passage_words :])
        tail = len(_encode(tokenizer, " " + passage, special=False))
        sources = copy_sources(clean[row])  # (pos,)
        positions = torch.arange(shortest)
        copied = (sources >= 0) & (positions >= shortest - tail)
        if not bool(copied.any()):
            raise ValueError(
                f"copy task (seed {seed + row}): no copied token at the end; use a longer length"
            )
        first, last = int(sources[copied].min()) - MIN_MATCH, int(sources[copied].max())
        if first < keep or last >= shortest - tail:
            raise ValueError(
                f"copy task (seed {seed + row}): the passage's first occurrence "
                "was cut; use a longer length"
            )
        span = last - first + 1
        corrupted[row, first : last + 1] = pool[
            torch.randint(len(pool), (span,), generator=generator)
        ]
        mask[row] = copied
    answers = torch.zeros_like(clean)
    answers[:, :-1] = clean[:, 1:]
    answers[~mask] = 0
    return TaskPairs("copy", "logprob", clean, corrupted, mask, answers, pad_id=_pad(tokenizer))


def single_token_names(tokenizer) -> list[str]:
    """The names of ``NAMES`` the tokenizer writes as one token after a space (not its unknown
    token)."""
    unknown = tokenizer.unk_token_id
    found = [(name, _encode(tokenizer, " " + name, special=False)) for name in NAMES]
    return [name for name, ids in found if len(ids) == 1 and ids[0] != unknown]


def ioi(tokenizer, n: int, seed: int) -> TaskPairs:
    """IOI sentences (``IOI_TEMPLATES``) with the tokenizer's single-token names: clean "...
    {IO} and {S} ..., {S} gave a {thing} to" (either order), answer IO, wrong S; corrupted: three
    other names (Wang et al.'s ABC); the metric: logit[IO] - logit[S] at the last position.
    Pairs whose texts tokenise to different lengths are redrawn. ValueError with fewer than 3
    single-token names."""
    names = single_token_names(tokenizer)
    if len(names) < 3:
        found = ", ".join(names) or "none"
        raise ValueError(
            f"ioi needs at least 3 names the tokenizer writes as one token; it has "
            f"{len(names)} of the {len(NAMES)} built in ({found})"
        )
    rng = random.Random(f"ioi {seed}")
    rows = []
    for _ in range(n):
        for _attempt in range(ATTEMPTS):
            io, s = rng.sample(names, 2)
            others = [x for x in names if x not in (io, s)]
            a, b, c = rng.sample(others if len(others) >= 3 else names, 3)
            template = rng.choice(IOI_TEMPLATES)
            words = {"place": rng.choice(PLACES), "thing": rng.choice(THINGS)}
            first, second = (io, s) if rng.random() < 0.5 else (s, io)
            clean = _encode(tokenizer, template.format(A=first, B=second, C=s, **words))
            corrupted = _encode(tokenizer, template.format(A=a, B=b, C=c, **words))
            io_id = _encode(tokenizer, " " + io, special=False)[0]
            s_id = _encode(tokenizer, " " + s, special=False)[0]
            if len(clean) == len(corrupted) and io_id in clean and s_id in clean:
                rows.append((clean, corrupted, io_id, s_id))
                break
        else:
            raise ValueError(
                f"ioi: no sentence whose clean and corrupted texts tokenise to the "
                f"same length in {ATTEMPTS} tries"
            )
    return _last_position_pairs("ioi", "logit_diff", rows, tokenizer)


def year_tokens(tokenizer) -> list[int]:
    """The ids of "00" .. "99" as the tokenizer writes the end of " 17YY" (" 17" then "YY");
    ValueError where it does not write every year that way."""
    century = _encode(tokenizer, " 17", special=False)
    ids = []
    for yy in range(100):
        got = _encode(tokenizer, f" 17{yy:02d}", special=False)
        unknown = got[-1] == tokenizer.unk_token_id
        if len(got) != len(century) + 1 or got[: len(century)] != century or unknown:
            shown = tokenizer.convert_ids_to_tokens(got)
            raise ValueError(
                f"greater-than needs years written as ' 17' + one two-digit token; "
                f"this tokenizer writes ' 17{yy:02d}' as {shown}"
            )
        ids.append(got[-1])
    return ids


def greater_than(tokenizer, n: int, seed: int) -> TaskPairs:
    """ "The {noun} lasted from the year 17YY to the year 17" (Hanna et al. 2023), YY drawn from
    02..98; corrupted: YY = 01; the metric: probability difference, the two-digit year tokens
    above YY counted +1, those at or below -1 (``candidates``, ``signs``)."""
    years = year_tokens(tokenizer)
    rng = random.Random(f"greater-than {seed}")
    rows, cutoffs = [], []
    for _ in range(n):
        for _attempt in range(ATTEMPTS):
            yy, noun = rng.randrange(2, 99), rng.choice(GT_NOUNS)
            clean = _encode(tokenizer, GT_TEMPLATE.format(noun=noun, yy=yy))
            corrupted = _encode(tokenizer, GT_TEMPLATE.format(noun=noun, yy=GT_CORRUPTED_YY))
            if len(clean) == len(corrupted):
                rows.append((clean, corrupted, years[yy], None))
                cutoffs.append(yy)
                break
        else:
            raise ValueError(
                f"greater-than: no sentence whose clean and corrupted texts "
                f"tokenise to the same length in {ATTEMPTS} tries"
            )
    pairs = _last_position_pairs("greater-than", "prob_diff", rows, tokenizer)
    candidates = torch.tensor(years, dtype=torch.long).expand(n, -1).clone()  # (batch, 100)
    signs = torch.tensor([[1.0 if y > yy else -1.0 for y in range(100)] for yy in cutoffs])
    from dataclasses import replace

    return replace(pairs, candidates=candidates, signs=signs)


def _last_position_pairs(task: str, metric: str, rows: list, tokenizer) -> TaskPairs:
    """Pairs of equal length within each row, padded on the right to the longest row; the
    metric reads each row's last real position."""
    pad = _pad(tokenizer)
    width = max(len(clean) for clean, *_ in rows)
    clean = torch.full((len(rows), width), pad, dtype=torch.long)
    corrupted = clean.clone()
    for i, (c, k, _, _) in enumerate(rows):
        clean[i, : len(c)], corrupted[i, : len(k)] = torch.tensor(c), torch.tensor(k)
    last = torch.tensor([len(c) - 1 for c, *_ in rows])
    answer = torch.tensor([a for _, _, a, _ in rows])
    wrong = None if rows[0][3] is None else torch.tensor([w for *_, w in rows])
    mask, answers, wrong_full = last_position_answers(clean, last, answer, wrong)
    notes = (
        () if len(set(last.tolist())) == 1 else ("rows of different lengths, padded on the right",)
    )
    return TaskPairs(
        task, metric, clean, corrupted, mask, answers, wrong_full, pad_id=pad, notes=notes
    )


def _pad(tokenizer) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0

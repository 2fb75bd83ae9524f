"""Synthetic tasks where the head split should matter, as deterministic seeded generators.

Every task yields a ``Batch``: ``tokens`` (batch, pos, feature) int64 -- each position carries
``len(spec.vocab_sizes)`` categorical features whose embeddings the model adds -- and ``labels``
(batch, output) int64 in ``[0, spec.num_classes)``. ``spec.readout`` says where the labels are read:
``"last"`` (all outputs from the last position) or ``"all"`` (output i from position i).
Same (task, n, seed) -> the same tensors, on any machine (a private ``torch.Generator``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class TaskSpec:
    """Shapes a model needs to fit a task; ``why`` says why the head split should matter."""

    name: str
    vocab_sizes: tuple[int, ...]  # one vocabulary per token feature
    seq_len: int
    num_outputs: int
    num_classes: int
    readout: str  # "last" | "all"
    causal: bool
    why: str


@dataclass(frozen=True)
class Batch:
    tokens: Tensor  # (batch, pos, feature) int64
    labels: Tensor  # (batch, output) int64


# ---------------------------------------------------------------- multi-lookup (D-retrieval)
LOOKUP_KEYS, LOOKUP_VALUES, LOOKUP_D = 8, 32, 4

MULTI_LOOKUP = TaskSpec(
    name="multi-lookup",
    vocab_sizes=(LOOKUP_KEYS + 1, LOOKUP_VALUES + 1),
    seq_len=LOOKUP_KEYS + 1,
    num_outputs=LOOKUP_D,
    num_classes=LOOKUP_VALUES,
    readout="last",
    causal=False,
    why=(
        "The query (last position) must return the values of D=4 keys at once, and the readout "
        "sees only that position. Key and value are separate features, added, so one head's "
        "output is a weighted average of value embeddings that no longer says which value "
        "belonged to which key; h >= D heads can each fetch one key (Yu et al. 2025)."
    ),
)


def multi_lookup(n: int, generator: torch.Generator) -> Batch:
    """n sequences of the 8 keys in random order, each with a random value, then a query.

    tokens[:, j] = (key_j, value_j) for j < 8; tokens[:, 8] = (8, 16), the query marker.
    labels[:, d] = the value stored with key d, for d < 4.
    Why heads matter: one head returns a single average over the four keys' positions, in which
    the values are no longer bound to their keys; four heads can fetch one key each.
    """
    keys = torch.argsort(torch.rand(n, LOOKUP_KEYS, generator=generator), dim=1)
    values = torch.randint(0, LOOKUP_VALUES, (n, LOOKUP_KEYS), generator=generator)
    query = torch.tensor([LOOKUP_KEYS, LOOKUP_VALUES]).expand(n, 1, 2)
    tokens = torch.cat([torch.stack([keys, values], dim=-1), query], dim=1)
    # value of key d = values at the position where keys == d
    where = torch.argsort(keys, dim=1)[:, :LOOKUP_D]  # (batch, D): position of key d
    labels = torch.gather(values, 1, where)
    return Batch(tokens=tokens, labels=labels)


# ---------------------------------------------------------------- recall (low-rank heads)
RECALL_KEYS, RECALL_VALUES = 32, 32

RECALL = TaskSpec(
    name="recall",
    vocab_sizes=(RECALL_KEYS + 1, RECALL_VALUES + 1),
    seq_len=RECALL_KEYS + 1,
    num_outputs=1,
    num_classes=RECALL_VALUES,
    readout="last",
    causal=False,
    why=(
        "The query names one of n=32 keys (shuffled, each once) and must return its value. "
        "The head has to put its weight on exactly the matching key: its scores q.k over the "
        "32 keys form a 32 x 32 identity in key space, which a head of size d_p < 32 can only "
        "approximate (the low-rank bottleneck of Bhojanapalli et al. 2020); blurred weights mix "
        "values of other keys, and key and value are added features, so a mixture no longer "
        "says which value was the matching key's. With d_model=64, h=8 (d_p=8) and h=16 "
        "(d_p=4) should hurt: the other side of Vaswani et al. Table 3 (A)."
    ),
)


def recall(n: int, generator: torch.Generator) -> Batch:
    """n sequences of the 32 keys in random order with random values, then a query key.

    tokens[:, j] = (key_j, value_j) for j < 32; tokens[:, 32] = (q, 32), q uniform in [0, 32).
    labels[:, 0] = the value stored with key q.
    Why heads matter: matching one key out of 32 sharply needs a score matrix of rank about 32;
    heads of size d_model / h < 32 blur it and mix in other keys' values.
    """
    keys = torch.argsort(torch.rand(n, RECALL_KEYS, generator=generator), dim=1)
    values = torch.randint(0, RECALL_VALUES, (n, RECALL_KEYS), generator=generator)
    q = torch.randint(0, RECALL_KEYS, (n, 1), generator=generator)
    query = torch.cat([q, torch.full_like(q, RECALL_VALUES)], dim=1).unsqueeze(1)
    tokens = torch.cat([torch.stack([keys, values], dim=-1), query], dim=1)
    where = torch.argsort(keys, dim=1).gather(1, q)  # (batch, 1): position of key q
    return Batch(tokens=tokens, labels=torch.gather(values, 1, where))


# ---------------------------------------------------------------- induction (two layers)
INDUCTION_LEN, INDUCTION_VOCAB = 24, 16

INDUCTION = TaskSpec(
    name="induction",
    vocab_sizes=(INDUCTION_VOCAB,),
    seq_len=INDUCTION_LEN,
    num_outputs=1,
    num_classes=INDUCTION_VOCAB,
    readout="last",
    causal=True,
    why=(
        "The last token A occurred once before, followed by B; predict B (Olsson et al. 2022). "
        "It takes a previous-token head in layer 1 and an induction head in layer 2 that "
        "composes with it, so two layers; one head per layer suffices in principle, so the "
        "head split should matter little unless heads get too small."
    ),
)


def induction(n: int, generator: torch.Generator) -> Batch:
    """Random causal sequences whose last token appears exactly once earlier, not just before.

    The earlier occurrence is at p in [0, len-3]; labels[:, 0] = tokens[:, p + 1].
    Why heads matter: a previous-token head and an induction head in two layers do it, one head
    per layer is enough, so only heads too small to attend sharply should hurt.
    """
    length, vocab = INDUCTION_LEN, INDUCTION_VOCAB
    tokens = torch.randint(0, vocab, (n, length), generator=generator)
    p = torch.randint(0, length - 2, (n,), generator=generator)
    rows = torch.arange(n)
    last = tokens[rows, p]
    # The trigger must be unique among the earlier tokens: replace other copies of it by
    # a different token (shifted by a random nonzero offset), so the answer is unambiguous.
    offset = torch.randint(1, vocab, (n, length), generator=generator)
    clash = tokens == last[:, None]
    clash[rows, p] = False
    tokens = torch.where(clash, (tokens + offset) % vocab, tokens)
    tokens[:, -1] = last
    return Batch(tokens=tokens.unsqueeze(-1), labels=tokens[rows, p + 1].unsqueeze(-1))


TASKS: dict[str, tuple[TaskSpec, Callable[[int, torch.Generator], Batch]]] = {
    MULTI_LOOKUP.name: (MULTI_LOOKUP, multi_lookup),
    RECALL.name: (RECALL, recall),
    INDUCTION.name: (INDUCTION, induction),
}


def get_task(name: str) -> tuple[TaskSpec, Callable[[int, torch.Generator], Batch]]:
    """(spec, generator function) for a task name; ValueError names the known tasks."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}, expected one of {', '.join(TASKS)}")
    return TASKS[name]


def generate(name: str, n: int, seed: int) -> Batch:
    """n examples of task ``name`` drawn from a generator seeded with ``seed``."""
    _, fn = get_task(name)
    return fn(n, torch.Generator().manual_seed(seed))

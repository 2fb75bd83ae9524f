"""Physical head pruning and the pruning curve (Michel et al. 2019, section 4), for any model.

Removing query head i of a layer deletes its rows of W_Q (and b_Q) and its columns of W_O. With
grouped K/V heads a K/V head goes when the last query head that reads it goes. When the kept
query heads no longer split evenly over the kept K/V heads, each kept query head gets a copy of
its K/V rows (``MultiHeadAttention`` groups evenly); the copies are not counted as parameters
(``unique_parameters``). A layer that loses every head outputs ``out_proj.bias`` alone (or zero),
``NoHeads``. The pruned model computes exactly what the original computes with those heads' mask
set to 0 (tested).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch

from headlab.attention import MultiHeadAttention
from headlab.heads.quality import MEASURES, measures, reference
from headlab.models import NoHeads
from headlab.models.interface import HeadModel
from headlab.schema import Fields

FRACTIONS = tuple(i / 10 for i in range(11))


def prune_attention(
    attention: MultiHeadAttention, remove: set[int]
) -> MultiHeadAttention | NoHeads:
    """A new attention block without the query heads in ``remove`` (parameters copied).

    Keeps rotary positions, causality, head size and K/V grouping; ValueError for a head index
    out of range, separate q/k/v projections or add_bias_kv.
    """
    heads, kv_heads, d = attention.num_heads, attention.num_kv_heads, attention.head_dim
    bad = [i for i in remove if not 0 <= i < heads]
    if bad:
        raise ValueError(f"head indices must be in [0, {heads}), got {sorted(bad)}")
    if attention.in_proj_weight is None or attention.bias_k is not None:
        raise ValueError("pruning needs packed in_proj weights and no add_bias_kv")
    keep = [i for i in range(heads) if i not in remove]
    bias = attention.out_proj.bias
    if not keep:
        return NoHeads(bias if bias is not None else torch.zeros(attention.embed_dim))
    group = heads // kv_heads
    kv_of = [i // group for i in keep]  # the K/V head each kept query head reads
    kv_keep = sorted(set(kv_of))
    even = len(keep) % len(kv_keep) == 0 and all(
        kv_of[j] == kv_keep[j // (len(keep) // len(kv_keep))] for j in range(len(keep))
    )
    kv_rows = kv_keep if even else kv_of  # uneven groups: one K/V copy per kept query head

    def rows(indices: list[int], start: int) -> torch.Tensor:
        return torch.cat([torch.arange(start + i * d, start + (i + 1) * d) for i in indices])

    q_dim, kv_dim = heads * d, kv_heads * d
    q_rows = rows(keep, 0)
    selected = torch.cat([q_rows, rows(kv_rows, q_dim), rows(kv_rows, q_dim + kv_dim)])
    new = MultiHeadAttention(
        attention.embed_dim,
        len(keep),
        bias=attention.in_proj_bias is not None,
        head_dim=d,
        num_kv_heads=len(kv_rows),
        batch_first=attention.batch_first,
        rotary_base=attention.rotary_base,
        causal=attention.causal,
        dtype=attention.in_proj_weight.dtype,
    )
    with torch.no_grad():
        new.in_proj_weight.copy_(attention.in_proj_weight[selected])
        if attention.in_proj_bias is not None:
            new.in_proj_bias.copy_(attention.in_proj_bias[selected])
            new.out_proj.bias.copy_(attention.out_proj.bias)
        new.out_proj.weight.copy_(attention.out_proj.weight[:, q_rows])
    new.duplicated_kv_heads = len(kv_rows) - len(kv_keep)
    return new.train(attention.training)


def unique_parameters(model: HeadModel) -> int:
    """Parameters of ``model``, K/V copies made by pruning counted once."""
    total = parameter_count_of(model)
    for attention in model.attention_layers():
        copies = getattr(attention, "duplicated_kv_heads", 0)
        if copies:
            per_row = attention.embed_dim + int(attention.in_proj_bias is not None)
            total -= 2 * copies * attention.head_dim * per_row
    return total


def parameter_count_of(model: HeadModel) -> int:
    """Distinct parameters (tied weights once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def prune_heads(model: HeadModel, heads: Mapping[int, Iterable[int]]) -> HeadModel:
    """``model`` without the given heads: {layer: [head, ...]} (current indices).

    Layers not named are shared with ``model``; pruned layers get new attention blocks.
    """
    for layer in heads:
        if not 0 <= layer < model.num_layers:
            raise ValueError(f"layer must be in [0, {model.num_layers}), got {layer}")
    attention = model.attention_layers()
    return model.with_attention(
        {i: prune_attention(attention[i], set(h)) for i, h in heads.items() if set(h)}
    )


def as_mask(model: HeadModel, heads: Mapping[int, Iterable[int]]) -> list[torch.Tensor]:
    """The head mask (one (head,) tensor per layer) that zeroes the given heads."""
    mask = [torch.ones(h) for h in model.heads_per_layer]
    for layer, removed in heads.items():
        for h in removed:
            mask[layer][h] = 0.0
    return mask


@dataclass(frozen=True)
class PruneStep:
    order: str
    fraction_pruned: float
    heads_pruned: int
    params: int
    latency_ms: float
    measures: dict[str, float]

    def to_dict(self) -> dict:
        return {
            "order": self.order,
            "fraction_pruned": self.fraction_pruned,
            "heads_pruned": self.heads_pruned,
            "params": self.params,
            "latency_ms": self.latency_ms,
            **self.measures,
        }

    @classmethod
    def from_dict(cls, f: Fields) -> PruneStep:
        known = ("order", "fraction_pruned", "heads_pruned", "params", "latency_ms")
        return cls(
            order=f.str("order"),
            fraction_pruned=f.number("fraction_pruned", 0.0, 1.0),
            heads_pruned=f.int("heads_pruned"),
            params=f.int("params"),
            latency_ms=f.number("latency_ms", 0.0),
            measures=f.measures(known, MEASURES),
        )


@dataclass(frozen=True)
class PruneResult:
    KIND: ClassVar[str] = "model-prune"

    model: str
    n_texts: int
    steps: list[PruneStep]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_texts": self.n_texts,
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-prune") -> PruneResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        steps = [PruneStep.from_dict(s) for s in f.objects("steps")]
        return cls(f.str("model"), f.int("n_texts"), steps)


def _latency_ms(model: HeadModel, texts: list[str], max_length: int, repeats: int) -> float:
    batch = model.tokenize(texts, max_length)
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            model.run(batch)
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def prune_curve(
    model: HeadModel,
    texts: list[str],
    ranking: list[tuple[int, int]],
    *,
    fractions: tuple[float, ...] = FRACTIONS,
    seed: int = 0,
    batch_size: int = 32,
    max_length: int = 128,
    latency_repeats: int = 3,
    on_step: Callable[[int], None] | None = None,
) -> PruneResult:
    """Prune growing shares of all heads in two orders and measure each pruned model.

    ``ranking``: every (layer, head), least important first (ImportanceResult.ranking()). The
    control order is a seeded random permutation. For each order and fraction f the first
    round(f * n_heads) heads go; the step reports the parameters of the whole model (K/V copies
    once), the median latency of one batch (``batch_size`` texts), and the measures of
    ``headlab.heads.quality`` against the unpruned model.
    """
    total = sum(model.heads_per_layer)
    if sorted(ranking) != [(l, h) for l, n in enumerate(model.heads_per_layer) for h in range(n)]:
        raise ValueError(f"ranking must list each of the {total} (layer, head) pairs once")
    if len(texts) < 2:
        raise ValueError(f"expected at least 2 texts, got {len(texts)}")
    shuffled = list(ranking)
    random.Random(seed).shuffle(shuffled)
    original = reference(model, texts, max_length, batch_size)
    timing_texts = texts[:batch_size]
    steps = []
    for order, sequence in (("importance", ranking), ("random", shuffled)):
        for f in fractions:
            n = round(f * total)
            removed: dict[int, list[int]] = {}
            for layer, head in sequence[:n]:
                removed.setdefault(layer, []).append(head)
            pruned = prune_heads(model, removed)
            steps.append(
                PruneStep(
                    order=order,
                    fraction_pruned=f,
                    heads_pruned=n,
                    params=unique_parameters(pruned),
                    latency_ms=_latency_ms(pruned, timing_texts, max_length, latency_repeats),
                    measures=measures(pruned, texts, original, max_length, batch_size),
                )
            )
            if on_step is not None:
                on_step(len(steps))
    return PruneResult(model.name, len(texts), steps)


def prune_by_importance(
    model: HeadModel,
    texts: list[str],
    *,
    seed: int = 0,
    fractions: tuple[float, ...] = FRACTIONS,
    max_length: int = 128,
    on_step: Callable[[int, int], None] | None = None,
) -> PruneResult:
    """The whole ``headlab model prune`` pipeline: Michel et al. importance on ``texts``, then
    ``prune_curve`` in that order and in a seeded random one. ``on_step(done, total)`` after the
    importance pass and after each pruned model (``total`` = 1 + 2 * len(fractions))."""
    from headlab.heads.importance import head_importance

    total = 1 + 2 * len(fractions)
    ranking = head_importance(model, texts, max_length=max_length).ranking()
    if on_step is not None:
        on_step(1, total)
    return prune_curve(
        model,
        texts,
        ranking,
        fractions=fractions,
        seed=seed,
        max_length=max_length,
        on_step=None if on_step is None else lambda done: on_step(1 + done, total),
    )

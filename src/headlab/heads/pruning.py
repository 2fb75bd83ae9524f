"""Physical head pruning and the pruning curve (Michel et al. 2019, section 4).

Removing head i of a layer with H heads of size D deletes rows i*D..(i+1)*D of each of the W_Q,
W_K, W_V blocks of ``in_proj_weight`` (and of ``in_proj_bias``) and the same columns of
``out_proj.weight``; the layer is rebuilt as a MultiHeadAttention with fewer heads of the same
size. A layer that loses every head outputs ``out_proj.bias`` alone (models.NoHeads). The pruned
model computes exactly what the original computes with those heads' mask set to 0.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import torch

from headlab.analysis.params import parameter_count
from headlab.attention import MultiHeadAttention
from headlab.heads.compare import mean_cosine, nn_agreement
from headlab.models import Encoder, NoHeads

FRACTIONS = tuple(i / 10 for i in range(11))


def prune_attention(
    attention: MultiHeadAttention, remove: set[int]
) -> MultiHeadAttention | NoHeads:
    """A new attention block without the heads in ``remove`` (parameters copied, not shared).

    Supports packed in_proj with biases and num_kv_heads == num_heads; ValueError otherwise or
    for a head index out of range.
    """
    heads, d = attention.num_heads, attention.head_dim
    bad = [i for i in remove if not 0 <= i < heads]
    if bad:
        raise ValueError(f"head indices must be in [0, {heads}), got {sorted(bad)}")
    if (
        attention.in_proj_weight is None
        or attention.in_proj_bias is None
        or attention.num_kv_heads != heads
        or attention.bias_k is not None
    ):
        raise ValueError("pruning needs packed in_proj with biases and num_kv_heads == num_heads")
    keep = [i for i in range(heads) if i not in remove]
    if not keep:
        return NoHeads(attention.out_proj.bias)
    cols = torch.cat([torch.arange(i * d, (i + 1) * d) for i in keep])  # within one block
    rows = torch.cat([cols + block * heads * d for block in range(3)])  # Q, K, V blocks
    new = MultiHeadAttention(
        attention.embed_dim,
        len(keep),
        head_dim=d,
        batch_first=attention.batch_first,
        dtype=attention.in_proj_weight.dtype,
    )
    with torch.no_grad():
        new.in_proj_weight.copy_(attention.in_proj_weight[rows])
        new.in_proj_bias.copy_(attention.in_proj_bias[rows])
        new.out_proj.weight.copy_(attention.out_proj.weight[:, cols])
        new.out_proj.bias.copy_(attention.out_proj.bias)
    return new.train(attention.training)


def prune_heads(encoder: Encoder, heads: Mapping[int, Iterable[int]]) -> Encoder:
    """``encoder`` without the given heads: {layer: [head, ...]} (current indices).

    Layers not named are shared with ``encoder``; pruned layers get new attention blocks.
    """
    for layer in heads:
        if not 0 <= layer < encoder.num_layers:
            raise ValueError(f"layer must be in [0, {encoder.num_layers}), got {layer}")
    layers = []
    for i, layer in enumerate(encoder.model.layers):
        remove = set(heads.get(i, ()))
        layers.append(
            layer.with_attention(prune_attention(layer.attention, remove)) if remove else layer
        )
    return encoder.with_model(encoder.model.with_layers(layers))


def as_mask(encoder: Encoder, heads: Mapping[int, Iterable[int]]) -> list[torch.Tensor]:
    """The head mask (one (head,) tensor per layer) that zeroes the given heads."""
    mask = [torch.ones(h) for h in encoder.heads_per_layer]
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
    mean_cosine: float
    nn_agreement: float


@dataclass(frozen=True)
class PruneResult:
    model: str
    n_texts: int
    steps: list[PruneStep]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_texts": self.n_texts,
            "steps": [asdict(s) for s in self.steps],
        }


def _latency_ms(encoder: Encoder, texts: list[str], max_length: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        encoder.embed(texts, len(texts), max_length=max_length)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def prune_curve(
    encoder: Encoder,
    texts: list[str],
    ranking: list[tuple[int, int]],
    *,
    fractions: tuple[float, ...] = FRACTIONS,
    seed: int = 0,
    batch_size: int = 32,
    max_length: int = 128,
    latency_repeats: int = 3,
) -> PruneResult:
    """Prune growing shares of all heads in two orders and measure each pruned model.

    ``ranking``: every (layer, head), least important first (ImportanceResult.ranking()). The
    control order is a seeded random permutation. For each order and fraction f the first
    round(f * n_heads) heads go; the step reports the parameter count of the whole encoder,
    the median latency of embedding one batch (``batch_size`` texts), and the mean cosine and
    nearest-neighbour agreement of the corpus embeddings with the unpruned ones.
    """
    total = sum(encoder.heads_per_layer)
    if sorted(ranking) != [(l, h) for l, n in enumerate(encoder.heads_per_layer) for h in range(n)]:
        raise ValueError(f"ranking must list each of the {total} (layer, head) pairs once")
    if len(texts) < 2:
        raise ValueError(f"expected at least 2 texts, got {len(texts)}")
    shuffled = list(ranking)
    random.Random(seed).shuffle(shuffled)
    original = encoder.embed(texts, batch_size, max_length=max_length)
    timing_texts = texts[:batch_size]
    steps = []
    for order, sequence in (("importance", ranking), ("random", shuffled)):
        for f in fractions:
            n = round(f * total)
            removed: dict[int, list[int]] = {}
            for layer, head in sequence[:n]:
                removed.setdefault(layer, []).append(head)
            pruned = prune_heads(encoder, removed)
            emb = pruned.embed(texts, batch_size, max_length=max_length)
            steps.append(
                PruneStep(
                    order=order,
                    fraction_pruned=f,
                    heads_pruned=n,
                    params=parameter_count(pruned.model),
                    latency_ms=_latency_ms(pruned, timing_texts, max_length, latency_repeats),
                    mean_cosine=mean_cosine(original, emb),
                    nn_agreement=nn_agreement(original, emb),
                )
            )
    return PruneResult(encoder.name, len(texts), steps)

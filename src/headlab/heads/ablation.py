"""What one head (or a few) does to a trained model's loss: ablate it and measure the objective.

The heads are ablated at their output, before W_O (``headlab.attention.interventions.ablate``),
in every batch of the objective:

    zero      the head's output is 0 (the same as head_mask 0)
    mean      its mean output over ``reference_texts`` (real tokens only), at every position
    resample  the output of the previous text of the same batch at the same position (a position
              past that text's end takes its output at a padding position)

The result is the model's own objective (``HeadModel.objective``: next-token cross-entropy for a
decoder, in-batch InfoNCE for a sentence encoder) averaged over the same batches, with and
without the ablation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch

from headlab.attention.interventions import AblationMode, ablate, mean_head_output, record
from headlab.heads.importance import even_batches
from headlab.heads.requests import AblationRequest, Texts, analysis_request, corpus_texts
from headlab.models.interface import HeadModel
from headlab.models.objectives import describe
from headlab.results.ablation_result import AblationResult, Group, Head
from headlab.results.node_names import group_name, parse_group


def parse_heads(spec: str) -> list[Head]:
    """ "3.5,4.1" -> [(3, 5), (4, 1)]: LAYER.HEAD pairs, comma-separated. Raises ValueError."""
    heads, groups = parse_ablation(spec)
    if groups:
        layer, group = groups[0]
        raise ValueError(
            f"heads must be LAYER.HEAD pairs like 3.5,4.1, got '{group_name(layer, group)}'"
        )
    return heads


def parse_ablation(spec: str) -> tuple[list[Head], list[Group]]:
    """ "3.5,4.g1" -> ([(3, 5)], [(4, 1)]): query heads LAYER.HEAD and whole K/V groups
    LAYER.gGROUP (every query head that reads K/V head GROUP; LAYER.kvGROUP is read too, as
    ``headlab.results.node_names`` says), comma-separated. Raises ValueError naming the item
    that is neither."""
    heads, groups = [], []
    for item in spec.split(","):
        layer, dot, head = item.strip().partition(".")
        group = parse_group(item)
        if dot and layer.isdigit() and head.isdigit():
            heads.append((int(layer), int(head)))
        elif group is not None:
            groups.append(group)
        else:
            raise ValueError(
                f"heads must be LAYER.HEAD pairs like 3.5,4.1 or K/V groups LAYER.gGROUP like "
                f"4.g1, got {item.strip()!r}"
            )
    return heads, groups


def group_heads(model: HeadModel, groups: Sequence[Group]) -> list[Head]:
    """The query heads (layer, head) of each K/V group (layer, group) of ``model``: group g of
    a layer with n query heads on k K/V heads is heads g*n/k .. (g+1)*n/k - 1. Raises
    ValueError for a layer or group the model does not have."""
    from headlab.attention.interventions import query_heads

    layers = model.attention_layers()
    heads = []
    for layer, group in groups:
        if not 0 <= layer < len(layers):
            raise ValueError(
                f"heads {group_name(layer, group)}: layer {layer} out of range, expected 0 to "
                f"{len(layers) - 1} ({model.name} has {len(layers)} layers)"
            )
        try:
            chosen = query_heads(layers[layer], kv_groups=[group])
        except ValueError as error:
            raise ValueError(f"heads {group_name(layer, group)}: {error}") from None
        heads.extend((layer, h) for h in chosen)
    return heads


def check_heads(model: HeadModel, heads: Sequence[Head]) -> None:
    """Raise ValueError naming the first (layer, head) that ``model`` does not have."""
    if not heads:
        raise ValueError("name at least one head to ablate (LAYER.HEAD)")
    counts = model.heads_per_layer
    for layer, head in heads:
        if not 0 <= layer < len(counts):
            raise ValueError(
                f"heads {layer}.{head}: layer {layer} out of range, expected 0 to "
                f"{len(counts) - 1} ({model.name} has {len(counts)} layers)"
            )
        if not 0 <= head < counts[layer]:
            raise ValueError(
                f"heads {layer}.{head}: head {head} out of range in layer {layer}, expected 0 "
                f"to {counts[layer] - 1} (it has {counts[layer]} heads)"
            )


@torch.no_grad()
def reference_means(
    model: HeadModel, layers: Sequence[int], texts: list[str], *, batch_size: int, max_length: int
) -> dict[int, torch.Tensor]:
    """layer -> (head, d_head): each head's mean output over the real tokens of ``texts``."""
    attention = model.attention_layers()
    sums: dict[int, torch.Tensor] = {}
    tokens = 0
    for idx in even_batches(len(texts), batch_size):
        batch = model.tokenize([texts[i] for i in idx], max_length)
        real = batch.attention_mask.sum()
        with ExitStack() as stack:
            recs = {i: stack.enter_context(record(attention[i], ["head_outputs"])) for i in layers}
            model.run(batch)
        for i, rec in recs.items():
            part = mean_head_output(rec["head_outputs"], batch.attention_mask) * real
            sums[i] = part if i not in sums else sums[i] + part
        tokens += int(real)
    return {i: total / tokens for i, total in sums.items()}


@contextmanager
def ablated(
    model: HeadModel,
    heads: Sequence[Head],
    *,
    mode: AblationMode = "zero",
    reference_texts: list[str] | None = None,
    batch_size: int = 32,
    max_length: int = 128,
) -> Iterator[HeadModel]:
    """Within the block, ``model`` runs with ``heads`` ablated (see the module docstring)."""
    check_heads(model, heads)
    layers = sorted({layer for layer, _ in heads})
    means = {}
    if mode == "mean":
        if not reference_texts:
            raise ValueError("mode 'mean' needs reference texts")
        means = reference_means(
            model, layers, reference_texts, batch_size=batch_size, max_length=max_length
        )
    attention = model.attention_layers()
    with ExitStack() as stack:
        for layer in layers:
            chosen = [h for l, h in heads if l == layer]
            reference = means.get(layer)
            stack.enter_context(ablate(attention[layer], chosen, mode=mode, reference=reference))
        yield model


@torch.no_grad()
def mean_objective(
    model: HeadModel, texts: list[str], *, batch_size: int, max_length: int
) -> float:
    """The model's objective averaged over even batches of ``texts``."""
    batches = even_batches(len(texts), batch_size)
    total = sum(
        float(model.objective([texts[i] for i in idx], None, max_length)) for idx in batches
    )
    return total / len(batches)


def ablation_effect(
    model: HeadModel,
    texts: AblationRequest | Texts,
    heads: Sequence[Head] | None = None,
    *,
    mode: AblationMode | None = None,
    reference_texts: list[str] | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
    kv_groups: Sequence[Group] | None = None,
) -> AblationResult:
    """The objective over ``texts`` with and without ``heads`` ablated, on the same batches:
    an ``AblationRequest``, or its corpus with its options as keywords (None: its default).
    ``kv_groups`` (layer, group) ablate every query head of those K/V groups too (the result
    lists them as heads).

    Texts with fewer than 2 words are skipped (the encoders' objective splits each text); at
    least 2 usable texts are needed. ``reference_texts`` (mode "mean") default to ``texts``.
    ``on_step(done, 2)`` after the baseline pass and after the ablated one.
    Raises ValueError for unknown heads, too few texts or a bad mode.
    """
    options = {"heads": heads, "kv_groups": kv_groups, "mode": mode, "batch_size": batch_size}
    request = analysis_request(AblationRequest, texts, **options)
    texts, max_length = corpus_texts(request.corpus, max_length, model.max_positions)
    mode, batch_size, heads = request.mode, request.batch_size, list(request.heads)
    objective = describe(model)  # ValueError for a model without an objective
    usable = [t for t in texts if len(t.split()) >= 2]
    if len(usable) < 2:
        raise ValueError(f"need at least 2 texts of 2+ words, got {len(usable)}")
    if request.kv_groups:
        heads = sorted({*heads, *group_heads(model, request.kv_groups)})
    check_heads(model, heads)
    baseline = mean_objective(model, usable, batch_size=batch_size, max_length=max_length)
    if on_step is not None:
        on_step(1, 2)
    reference = reference_texts if reference_texts is not None else usable
    options = {"batch_size": batch_size, "max_length": max_length}
    with ablated(model, heads, mode=mode, reference_texts=reference, **options):
        ablated_value = mean_objective(model, usable, batch_size=batch_size, max_length=max_length)
    if on_step is not None:
        on_step(2, 2)
    return AblationResult(
        model=model.name,
        n_texts=len(usable),
        objective=objective,
        mode=mode,
        heads=[tuple(h) for h in heads],
        baseline=baseline,
        ablated=ablated_value,
    )

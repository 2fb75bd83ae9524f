"""The seed question on a trained model: the same weights viewed with fewer heads.

Viewing a layer's attention as h heads keeps every parameter and changes only how the heads'
scores are grouped: h softmaxes over merged groups of heads instead of one per head
(``HeadModel.with_head_view``: the sum of a group's scores / sqrt(group size), which is what
re-split projections compute and also covers grouped K/V heads and rotary positions; with 9
query heads on 3 K/V heads, 3 heads means one head per K/V group). Each variant runs
over the corpus and is compared with the original (``headlab.heads.quality``): mean cosine and
nearest-neighbour agreement of an encoder's embeddings, perplexity and next-token agreement of a
decoder's predictions.
"""

from __future__ import annotations

from collections.abc import Callable

from headlab.heads.quality import measures, reference
from headlab.heads.requests import CollapseRequest, Texts, analysis_request, corpus_texts
from headlab.models.interface import HeadModel
from headlab.results.collapse_result import CollapseResult, CollapseRow


def collapse_head_counts(model: HeadModel) -> tuple[int, ...]:
    """Every head count that divides each layer's query heads (ascending, the original last)."""
    heads = model.heads_per_layer
    return tuple(h for h in range(1, min(heads) + 1) if all(n % h == 0 for n in heads))


def check_head_counts(model: HeadModel, counts: tuple[int, ...], name: str = "head_counts") -> None:
    """ValueError naming ``name`` (a CLI passes its flag) for a count that does not divide the
    query heads of every layer; the message lists the counts that do."""
    if not counts:
        raise ValueError(f"{name} must list at least one head count, got none")
    possible = collapse_head_counts(model)
    for h in counts:
        if h not in possible:
            raise ValueError(
                f"{name} {h} does not divide the heads of every layer of {model.name}; "
                f"choose from {','.join(map(str, possible))}"
            )


def collapse_steps(model: HeadModel, head_counts: tuple[int, ...] | None = None) -> int:
    """How many models ``collapse_heads`` runs: the original, each count, each layer alone."""
    counts = collapse_head_counts(model) if head_counts is None else head_counts
    return 1 + len(counts) + model.num_layers


def collapsed(model: HeadModel, num_heads: int, layers: list[int] | None = None) -> HeadModel:
    """``model`` with the attention of ``layers`` (default: all) viewed as ``num_heads`` heads."""
    return model.with_head_view(num_heads, layers)


def collapse_heads(
    model: HeadModel,
    texts: CollapseRequest | Texts,
    head_counts: tuple[int, ...] | None = None,
    *,
    per_layer_heads: int | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> CollapseResult:
    """Run ``texts`` with every layer viewed as each of ``head_counts`` heads (default: all that
    divide), then with one layer at a time viewed as ``per_layer_heads``; compare each with the
    original: a ``CollapseRequest``, or its corpus with its options (None: its default).
    ``on_step(done, total)`` after each model run (``collapse_steps``). Needs at least 2 texts.
    Raises ValueError for a count that does not divide, before any work."""
    options = {"per_layer_heads": per_layer_heads, "batch_size": batch_size}
    request = analysis_request(CollapseRequest, texts, head_counts=head_counts, **options)
    texts, max_length = corpus_texts(request.corpus, max_length, model.max_positions)
    if len(texts) < 2:
        raise ValueError(f"expected at least 2 texts, got {len(texts)}")
    per_layer_heads, batch_size = request.per_layer_heads, request.batch_size
    counts = request.head_counts or collapse_head_counts(model)
    check_head_counts(model, counts)
    check_head_counts(model, (per_layer_heads,), "per_layer_heads")
    total = collapse_steps(model, counts)
    done = 0

    def row(variant: HeadModel, num_heads: int, layer: int | None) -> CollapseRow:
        result = CollapseRow(
            num_heads, measures(variant, texts, original, max_length, batch_size), layer
        )
        step()
        return result

    def step() -> None:
        nonlocal done
        done += 1
        if on_step is not None:
            on_step(done, total)

    original = reference(model, texts, max_length, batch_size)
    step()
    all_layers = [row(collapsed(model, h), h, None) for h in counts]
    per_layer = [
        row(collapsed(model, per_layer_heads, [layer]), per_layer_heads, layer)
        for layer in range(model.num_layers)
    ]
    return CollapseResult(model.name, len(texts), all_layers, per_layer)

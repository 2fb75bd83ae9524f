"""Run a model once and collect every head's statistics on the way, without the weights.

Each attention layer of the model gets a statistics request for one forward
(``headlab.attention.streaming_sums.observing``): the kernel then computes that layer's attention
query chunk by chunk, reduces each chunk to per-head sums and hands them back, through every
intervention the layer has (an ablated head is measured ablated). Works for any model behind
``HeadModel``: the model computes its own masks (padding, causal) and passes them to its
attention as usual.

The C heap's free pages go back to the system (``attention.freed_memory``) after a layer
once the process has grown by ``FREED_BUDGET`` since the first layer, and after the forward:
the chunks' temporaries, freed, would otherwise stay resident, piling up over the layers and
through the logits computed next (0.7 GiB of SmolLM2's forward at 8192 tokens, measured,
docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.freed_memory import ResidentBudget, return_freed_memory
from headlab.attention.streaming_sums import CHUNK_ELEMENTS, HeadSums, StatisticsRequest, observing
from headlab.models.interface import HeadMask, HeadModel, TokenBatch
from headlab.models.output_rows import OutputRows, output_rows

#: Resident growth (bytes) since the first layer over which the freed memory goes back between
#: layers. Each return costs the page faults of the memory the next layer takes again
#: (measured: after every layer at 2048 tokens, 6-8% of the time); this bounds what piles up.
FREED_BUDGET = 128 * 2**20


def model_head_sums(
    model: HeadModel,
    batch: TokenBatch,
    *,
    head_mask: HeadMask = None,
    chunk_elements: int = CHUNK_ELEMENTS,
    on_layer: Callable[[int], None] | None = None,
    window: tuple[int, int] | None = None,
    copy_sources: Tensor | None = None,
    block: int | None = None,
    logits_by_rows: bool = False,
) -> tuple[Tensor | OutputRows, list[HeadSums]]:
    """One forward of ``model`` on ``batch``: (its output, the head sums of each layer).

    Real tokens (``batch.attention_mask``) are the counted queries; the model's special
    positions are summed as statistics of their own. on_layer(i) is called after layer i.
    window, copy_sources, block: the role scores of ``headlab.attention.streaming_sums`` (window
    errors, copy positions (batch, pos), the blocked map). Raises ValueError when a layer was
    not called exactly once. logits_by_rows: a next-token model's output is ``OutputRows``
    (its logits computed later a block of positions at a time, never whole) instead of the
    (batch, pos, vocab) logits.
    """
    special = model.special_positions(batch)
    layers = model.attention_layers()
    collected: list[list[HeadSums]] = [[] for _ in layers]
    resident = ResidentBudget(FREED_BUDGET)

    def reporter(i: int) -> Callable[[HeadSums], None]:
        def report(sums: HeadSums) -> None:
            collected[i].append(sums)
            resident.check()  # the layer's chunks are freed: their pages may go
            if on_layer is not None:
                on_layer(sum(map(len, collected)))

        return report

    with ExitStack() as stack, torch.no_grad():
        for i, layer in enumerate(layers):
            request = StatisticsRequest(
                query_mask=batch.attention_mask,
                special=special,
                chunk_elements=chunk_elements,
                report=reporter(i),
                window=window,
                copy_sources=copy_sources,
                block=block,
            )
            stack.enter_context(observing(layer, request))
        if logits_by_rows and model.objective_kind == "next-token":
            output = output_rows(model, batch, head_mask)
        else:
            output = model.run(batch, head_mask)
    return_freed_memory()  # the forward's temporaries, before the caller's logits
    calls = [len(c) for c in collected]
    if any(n != 1 for n in calls):
        raise ValueError(f"expected one attention call per layer, got {calls}")
    return output, [c[0] for c in collected]

"""Head importance after Michel, Levy & Neubig (2019): I_h = E_x |dL(x)/d xi_h|, for any model.

xi_h multiplies head h's output before W_O (MultiHeadAttention's ``head_mask``), evaluated at
xi = 1 (the unpruned model). Scores are normalised per layer by their l2 norm, as Michel et al. do.

L is the model's own ``objective`` (``headlab.models.objectives``): the next-token cross-entropy
for a language model, an in-batch contrastive loss (InfoNCE, temperature ``temperature``) between
the halves of each text for a sentence encoder. The expectation runs over batches (|grad| per
batch). A model without an objective is refused.
"""

from __future__ import annotations

import torch

from headlab.heads.requests import (
    ImportanceRequest,
    Texts,
    analysis_request,
    corpus_texts,
)
from headlab.models.interface import HeadModel
from headlab.models.objectives import (
    CONTRASTIVE,
    NEXT_TOKEN,
    TEMPERATURE,
    contrastive_objective,
    describe,
    info_nce,
    split_halves,
)
from headlab.results.importance_result import ImportanceResult

# the objective's description in results files (older names of these constants)
OBJECTIVE = CONTRASTIVE
__all__ = [
    "NEXT_TOKEN",
    "OBJECTIVE",
    "ImportanceResult",
    "contrastive_objective",
    "even_batches",
    "head_importance",
    "info_nce",
    "split_halves",
]


def even_batches(n: int, batch_size: int) -> list[range]:
    """Split range(n) into ceil(n / batch_size) contiguous batches of near-equal size."""
    count = -(-n // batch_size)
    bounds = [round(i * n / count) for i in range(count + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(count)]


def head_importance(
    model: HeadModel,
    texts: ImportanceRequest | Texts,
    *,
    batch_size: int | None = None,
    temperature: float | None = None,
    max_length: int | None = None,
    on_batch=None,
) -> ImportanceResult:
    """Michel et al.'s importance of every head of ``model`` over ``texts`` (see module doc):
    an ``ImportanceRequest``, or its corpus with its options as keywords (None: its default).

    Only the head-mask gradient is computed (the parameters are frozen meanwhile). Texts with
    fewer than 2 words are skipped; at least 2 usable texts are needed (ValueError).
    ``temperature`` is the encoders' InfoNCE temperature. on_batch(done, total): progress.
    """
    request = analysis_request(
        ImportanceRequest, texts, batch_size=batch_size, temperature=temperature
    )
    texts, max_length = corpus_texts(request.corpus, max_length, model.max_positions)
    batch_size = request.batch_size
    temperature = TEMPERATURE if request.temperature is None else request.temperature
    objective = describe(model, temperature)  # ValueError for a model without one
    usable = [t for t in texts if len(t.split()) >= 2]
    if len(usable) < 2:
        raise ValueError(f"need at least 2 texts of 2+ words, got {len(usable)}")
    params = list(model.parameters())
    dtype = params[0].dtype
    xi = [torch.ones(h, dtype=dtype, requires_grad=True) for h in model.heads_per_layer]
    raw = [torch.zeros(h, dtype=torch.float64) for h in model.heads_per_layer]
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        batches = even_batches(len(usable), batch_size)
        for done, idx in enumerate(batches, start=1):
            chunk = [usable[i] for i in idx]
            if model.objective_kind == "contrastive":  # the temperature is ours to choose
                loss = contrastive_objective(
                    model, chunk, xi, temperature=temperature, max_length=max_length
                )
            else:
                loss = model.objective(chunk, xi, max_length)
            grads = torch.autograd.grad(loss, xi)
            for total, g in zip(raw, grads, strict=True):
                total += g.abs().to(torch.float64)
            if on_batch is not None:
                on_batch(done, len(batches))
    finally:
        for p, flag in zip(params, flags, strict=True):
            p.requires_grad_(flag)
    raw = [r / len(batches) for r in raw]
    normalised = [r / r.norm().clamp_min(1e-30) for r in raw]
    return ImportanceResult(
        model=model.name,
        n_texts=len(usable),
        objective=objective,
        importance=[r.tolist() for r in normalised],
        raw=[r.tolist() for r in raw],
    )

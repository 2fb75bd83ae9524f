"""Head statistics and role scores of many documents, as sums that merge exactly.

``document_sums(model, text, options)`` runs the one streaming pass of ``long_text_statistics``
over one document and keeps, per layer and head, plain sums instead of means:

    sums[name]       the sum over the document's queries of each statistic of
                     ``heads.statistics`` (entropy, max_weight, the special positions, self,
                     distance, contribution_norm; ``prev`` over queries q >= 1), of
                     ``window_error`` (documents longer than sinks + window only) and of
                     ``copy_weight`` (over the copy positions)
    retrieval_hits   the copy positions where the head's largest weight is on the source AND
                     the model's own top-1 prediction is the true next token (Wu et al.)
    counts           n_queries, n_prev, n_window (the queries of the documents with window
                     errors), n_copy, n_correct (copy positions predicted right)

``merge_sums`` adds documents in the order given, in float64 (Python floats): the same order
gives the same bits, wherever each document ran. ``corpus_result`` divides: the corpus means are
the summed statistic over the summed count, every query of every document weighing the same
(a longer document weighs more), and the roles follow ``heads.roles``' rules on those means. For
one document the result equals ``long_text_statistics``' statistics and roles bit for bit.

A document not longer than sinks + window has every key in the window: it adds no window error
(as ``long_text_statistics`` gives none for it), so the corpus' window error is the mean over
the queries of the longer documents. The role note says how many documents that left out.
"""

from __future__ import annotations

import torch

from headlab.attention.streaming_sums import CHUNK_ELEMENTS, HeadSums
from headlab.heads.long_context import text_pass
from headlab.heads.roles import head_roles
from headlab.heads.statistics import (
    UNMEASURED,
    measured,
    metric_names,
    per_head_means,
    special_names,
    unmeasured_note,
)
from headlab.models.interface import HeadModel
from headlab.results.corpus_roles_result import (
    ROLE_SUMS,
    CorpusCounts,
    CorpusRolesResult,
    DocumentSums,
    RoleRequest,
)
from headlab.results.head_roles import HeadRoles
from headlab.results.head_statistics import HeadStatistics

DEFAULT_OPTIONS = RoleRequest()  # frozen: one instance serves every call


def document_sums(
    model: HeadModel,
    text: str,
    options: RoleRequest = DEFAULT_OPTIONS,
    *,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> DocumentSums:
    """The sums of one document (see the module docstring), from one forward of ``model``.

    ValueError for an empty text, options out of range (max_tokens beyond the model's context
    too), MemoryError (via ``check_fits``) when the pass would not fit in this machine's memory.
    """
    options.check()
    run = text_pass(
        model,
        text,
        max_tokens=options.max_tokens,
        window=(options.sinks, options.window),
        min_match=options.min_match,
        chunk_elements=chunk_elements,
    )
    per_layer, batch = run.per_layer, run.batch
    n_tokens = len(batch.tokens[0])
    predicts = run.correct is not None
    correct = run.correct if predicts else torch.zeros(per_layer[0].n_copy, dtype=torch.bool)
    special = special_names(model, model.special_positions(batch))
    statistics, _ = measured(metric_names(special), [s.sums for s in per_layer])
    names = (*statistics, *(n for n in ROLE_SUMS if n in per_layer[0].sums))
    first = per_layer[0]
    return DocumentSums(
        model=model.name,
        first_token=model.first_token,
        kv_heads_per_layer=list(model.kv_heads_per_layer),
        predicts=predicts,
        documents=1,
        truncated=int(run.text_tokens > n_tokens),
        text_tokens=run.text_tokens,
        n_queries=first.n_queries,
        n_prev=first.n_prev,
        n_window=first.n_queries if run.windowed else 0,
        n_copy=first.n_copy,
        n_correct=int(correct.sum()),
        sums={name: [s.sums[name].tolist() for s in per_layer] for name in names},
        retrieval_hits=run.retrieval_hits() or [[0] * len(s.sums["entropy"]) for s in per_layer],
    )


def merge_sums(parts: list[DocumentSums]) -> DocumentSums:
    """The sums of ``parts`` added in the order given (the first's values, then each next one's
    added; float64); ValueError when they are not of the same model and metrics."""
    if not parts:
        raise ValueError("expected the sums of at least one document, got none")
    total = parts[0]
    for i, part in enumerate(parts[1:], start=1):
        same = (
            part.model,
            part.first_token,
            part.kv_heads_per_layer,
            part.predicts,
            part.statistic_names,
            [len(r) for r in part.retrieval_hits],
        )
        expected = (
            total.model,
            total.first_token,
            total.kv_heads_per_layer,
            total.predicts,
            total.statistic_names,
            [len(r) for r in total.retrieval_hits],
        )
        if same != expected:
            raise ValueError(
                f"document {i}: expected sums of {total.model} with the statistics "
                f"{', '.join(total.statistic_names)}, got {part.model} with "
                f"{', '.join(part.statistic_names)}"
            )
        total = _added(total, part)
    return total


def _added(a: DocumentSums, b: DocumentSums) -> DocumentSums:
    names = [*a.sums, *(name for name in b.sums if name not in a.sums)]
    sums = {}
    for name in names:
        if name not in b.sums:
            sums[name] = a.sums[name]
        elif name not in a.sums:
            sums[name] = b.sums[name]
        else:
            sums[name] = [
                [x + y for x, y in zip(ra, rb, strict=True)]
                for ra, rb in zip(a.sums[name], b.sums[name], strict=True)
            ]
    hits = [
        [x + y for x, y in zip(ra, rb, strict=True)]
        for ra, rb in zip(a.retrieval_hits, b.retrieval_hits, strict=True)
    ]
    counts = (
        "documents",
        "truncated",
        "text_tokens",
        "n_queries",
        "n_prev",
        "n_window",
        "n_copy",
        "n_correct",
    )
    added = {name: getattr(a, name) + getattr(b, name) for name in counts}
    return DocumentSums(
        model=a.model,
        first_token=a.first_token,
        kv_heads_per_layer=a.kv_heads_per_layer,
        predicts=a.predicts,
        sums=sums,
        retrieval_hits=hits,
        **added,
    )


def corpus_result(total: DocumentSums, options: RoleRequest) -> CorpusRolesResult:
    """The corpus means and roles of merged sums (see the module docstring)."""
    names = total.statistic_names
    layers = [[_head_sums(total, layer)] for layer in range(len(total.retrieval_hits))]
    statistics = HeadStatistics(
        total.model,
        total.documents,
        len(layers),
        max(len(row) for row in total.retrieval_hits),
        per_head_means(layers, names),
        notes=[unmeasured_note(name) for name in UNMEASURED if name not in names],
    )
    counts = CorpusCounts(
        total.documents,
        total.truncated,
        total.n_queries,
        total.n_window,
        total.n_copy,
        total.n_correct,
    )
    return CorpusRolesResult(statistics, counts, options, _roles(total, statistics, options))


def _head_sums(total: DocumentSums, layer: int) -> HeadSums:
    """One layer's sums as the kernel hands them over (float64), for ``per_head_means``."""
    sums = {
        name: torch.tensor(grid[layer], dtype=torch.float64) for name, grid in total.sums.items()
    }
    return HeadSums(sums, torch.zeros(0), total.n_queries, total.n_prev, total.n_copy)


def _roles(total: DocumentSums, statistics: HeadStatistics, options: RoleRequest) -> HeadRoles:
    """Each head's role scores and role from the merged sums (``heads.roles.head_roles``, as for
    one text)."""

    def means(name: str, count: int) -> list[list[float]]:
        return [
            (torch.tensor(row, dtype=torch.float64) / count).tolist() for row in total.sums[name]
        ]

    notes = []
    if 0 < total.n_window < total.n_queries:
        notes.append(
            f"documents not longer than {options.sinks} sinks + a window of "
            f"{options.window} ({total.n_queries - total.n_window} of {total.n_queries} "
            "tokens) add no window errors"
        )
    return head_roles(
        sinks=options.sinks,
        window=options.window,
        first=statistics.metrics[total.first_token],
        window_error=means("window_error", total.n_window) if total.n_window else None,
        copy_weight=means("copy_weight", total.n_copy) if total.n_copy else None,
        retrieval_hits=total.retrieval_hits if total.predicts else None,
        copies=total.n_copy,
        kv_heads_per_layer=total.kv_heads_per_layer,
        no_window=f"no document is longer than {options.sinks} sinks + a window of "
        f"{options.window}: every key is in the window, no window errors or roles",
        notes=notes,
    )

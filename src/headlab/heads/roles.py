"""What each head is for at long context: a role per head, with the numbers behind it.

From one streaming pass over a long text (``heads.long_context``), per head:

    retrieval     Wu et al. (2024): at the text's copy positions (``heads.repeats``), the share
                  where the model's own top-1 prediction is the true next token AND the head's
                  largest weight is on that token's earlier occurrence
    copy_weight   the mean weight on that earlier occurrence at the copy positions (induction on
                  the text's own repeats, Olsson et al. 2022)
    window_error  mean over queries of ||o - o^window|| / ||o||: the relative error of the
                  head's output if it saw only the first ``sinks`` keys and the last ``window`` ones
                  (0: nothing changes; not a share: above 1 the windowed output is farther
                  from the full one than no output at all)
                  (DuoAttention's streaming heads, StreamingLLM's sinks), exact, from the same
                  weights; per K/V group, the largest of its query heads' (a group's cache can
                  only shrink if every head reading it can)
    first         the mean weight on the first token (the attention sink, Gu et al. 2025)

and a role, the first rule that holds:

    retrieval   retrieval >= 0.1 (Wu et al.'s threshold)
    copy        copy_weight >= 0.3
    sink        first >= 0.3 and window_error <= 0.05: parks on the first token, else local
    local       window_error <= 0.05: sinks plus a recent window reproduce its output
    mixed       none of these

The previous-token weight and the mean attention distance (``heads.statistics``) are shown
beside the roles but decide none: a previous-token head is a local head (its window error is
about 0), and the window error measures exactly what a short distance only suggests (a head
with a mean distance of 2000 tokens can still lose nothing to a window when its far weight
sits on the sinks). ``HeadRoles.examples`` lists each role's clearest heads.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from headlab.results.head_roles import COPY, LOCAL, RETRIEVAL, SINK, HeadRoles


def role(retrieval: float | None, copy: float | None, first: float, window_error: float) -> str:
    """The role of one head by the rules of the module docstring (None: not measured)."""
    if retrieval is not None and retrieval >= RETRIEVAL:
        return "retrieval"
    if copy is not None and copy >= COPY:
        return "copy"
    if window_error <= LOCAL:
        return "sink" if first >= SINK else "local"
    return "mixed"


def head_roles(
    *,
    sinks: int,
    window: int,
    first: list[list[float]],
    window_error: list[list[float]] | None,
    copy_weight: list[list[float]] | None,
    retrieval_hits: list[list[int]] | None,
    copies: int,
    kv_heads_per_layer: list[int],
    no_window: str,
    notes: Sequence[str] = (),
) -> HeadRoles:
    """The roles from measured means: ``first``, ``window_error`` (None: not measured, and
    ``no_window`` says why) and ``copy_weight`` (layer, head); ``retrieval_hits`` (layer, head)
    the copy positions where the head's largest weight is on the source and the model predicted
    the copied token (None: the model predicts no tokens); ``copies`` the copy positions."""
    notes = list(notes)
    retrieval = None
    if copies == 0:
        notes.insert(
            0, "no copy positions (no repeat of an earlier passage): no retrieval or copy scores"
        )
        copy_weight = None
    elif retrieval_hits is None:
        notes.insert(0, "the model predicts no tokens: no retrieval scores")
    else:
        retrieval = [
            (torch.tensor(row, dtype=torch.float64) / copies).tolist() for row in retrieval_hits
        ]
    groups = roles = None
    if window_error is None:
        notes.append(no_window)
    else:
        groups = [
            torch.tensor(row, dtype=torch.float64).view(kv, -1).amax(dim=1).tolist() if row else []
            for row, kv in zip(window_error, kv_heads_per_layer, strict=True)
        ]
        roles = [
            [
                role(
                    None if retrieval is None else retrieval[layer][h],
                    None if copy_weight is None else copy_weight[layer][h],
                    first[layer][h],
                    window_error[layer][h],
                )
                for h in range(len(row))
            ]
            for layer, row in enumerate(window_error)
        ]
    return HeadRoles(
        sinks, window, copies, retrieval, copy_weight, window_error, groups, roles, "; ".join(notes)
    )

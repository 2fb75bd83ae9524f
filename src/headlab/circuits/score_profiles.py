"""Do the heads of one layer read different upstream parts? Key-side profiles per head, against
the same weights viewed as one head.

A head's key-side profile is the mean, over query rows, of its key-side marginal at the key it
attends (score_sides.py: one value per upstream component) scaled to unit length. The same
weights viewed as one head (``with_head_view(1)``: the kernel's ``merge_view`` sums the heads'
scores and divides by sqrt(head)) have the score sum_h s_h / sqrt(head), so their key-side
marginal at a key is sum_h of the heads' marginals / sqrt(head), at the key that merged score
ranks first. Per layer: the mean cosine between the profiles of two heads (1: every head reads
the same parts), and between each head's and the one-head view's.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from headlab.circuits.score_sides import Sides, kernel_scale, softcap_of


def _unit(rows: Tensor) -> Tensor:
    return rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def key_profiles(sides: Sides, layer: int, queries: list[int]) -> dict:
    """Of ``layer`` on the one text of ``sides``, at the query rows ``queries``: "heads"
    (head, component + 1) each head's key-side profile, "one_head" (component + 1,) the
    one-head view's, "components" their names, "within" the mean cosine between two heads'
    profiles, "to_one_head" the mean cosine of a head's with the one-head view's. A soft-cap
    family is refused (the view merges the scores after it)."""
    if softcap_of(sides.runner.model, layer) is not None:
        raise ValueError("key profiles of a soft-capped layer: the one-head view is not linear")
    length = sides.runner.ids.shape[1]
    q_terms, k_terms = sides.side_terms(layer, slice(0, length))  # (component + 1, 1, ...)
    clean = sides.clean_scores(layer)
    scale = kernel_scale(clean["q"], clean["k"], clean["logits"])
    scores = clean["scores"][0]  # (head, q_pos, k_pos)
    heads, groups = scores.shape[0], k_terms.shape[2]
    per = heads // groups
    q = q_terms.sum(0)[0]  # (head, q_pos, d_head)
    merged = scores.sum(0) / math.sqrt(heads)
    own, one = [], []
    causal = sides.runner.model.causal
    for i in queries:
        seen = i + 1 if causal else length  # an encoder's query sees every key
        keys = [*scores[:, i, :seen].argmax(-1).tolist(), int(merged[i, :seen].argmax())]
        at = [scale * k_terms[:, 0, h // per, keys[h]] @ q[h, i] for h in range(heads)]
        own.append(torch.stack(at))  # (head, component + 1)
        j = keys[-1]
        view = sum(scale * k_terms[:, 0, h // per, j] @ q[h, i] for h in range(heads))
        one.append(view / math.sqrt(heads))
    profiles = _unit(_unit(torch.stack(own)).mean(0))  # (head, component + 1)
    one_head = _unit(_unit(torch.stack(one)).mean(0))
    cos = profiles @ profiles.t()
    off = ~torch.eye(heads, dtype=torch.bool)
    return {
        "components": [*sides.components(layer), "qk-bias"],
        "heads": profiles.tolist(),
        "one_head": one_head.tolist(),
        "within": float(cos[off].mean()) if heads > 1 else 1.0,
        "to_one_head": float((profiles @ one_head).mean()),
    }


__all__ = ["key_profiles"]

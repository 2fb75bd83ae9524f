"""Why two head configurations give equal or different outputs: diagnosis per query row.

Every finding is measured on the two traces of the same input, row by row (a row is one query
position of one batch item), and covers the share of rows where its condition holds:

- ``same_config``: both sides have the same heads and head size (and so compute the same function);
  when it holds it is the only finding.
- ``single_key``: the row sees exactly one key, so every head puts weight 1 on it.
- ``saturated_same_key``: every head of both sides puts all but ``SATURATION`` of its weight on the
  same key (scores of order 1e5, as with ``torch.rand`` weights, make float32 softmax one-hot).
- ``uniform``: every head of both sides attends uniformly over its visible keys (identical keys,
  zero W_K): the split cannot change an average.
- ``identical_values``: the visible value rows are equal, so any weights give the same output.
- ``partition``: the general case, every row not covered above: the h softmaxes over a partition
  of the components differ from the one softmax over all of them. The detail says by how much
  (total variation between each head's weights and the other side's closest head).

Rows that see exactly one key are not also counted as saturated or uniform.

The findings read each side through ``SideFacts``, taken from its trace (``side_facts``) as soon
as the side has run: the weights, the visible keys and what the scores say (their scale and each
row's top-two gap). The scores themselves (one (batch, q_pos, k_pos) float32 matrix per head) are
then dropped before the other side runs (docs/answers.md, memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from headlab.analysis.explain import describe
from headlab.attention.trace import AttentionTrace
from headlab.results.comparison_result import FindingRow, Measure

SATURATION = 1e-6  # weight a "one-hot" row may leave off its top key
UNIFORM_TOL = 1e-6  # largest deviation from 1/n_visible that still counts as uniform


@dataclass(frozen=True)
class Finding:
    """One explanation as measured: its code, the share of query rows it covers, those rows and
    its measured numbers (``row()`` is the plain result, ``results.comparison_result.FindingRow``).

    measures: the numbers behind the finding, by name (``rows`` and ``of_rows`` for every code
    but same_config; see ``headlab.analysis.explain.describe`` for the rest); None where a
    number is undefined (no gap between two keys when a row has one). detail: the sentence
    written from them. rows: (batch, q_pos) bool, the rows it covers (not in the plain row).
    """

    code: str
    fraction: float
    rows: Tensor
    measures: dict[str, Measure] = field(default_factory=dict)

    @property
    def detail(self) -> str:
        return describe(self.code, self.measures)

    def row(self) -> FindingRow:
        """The finding as plain data (without its rows)."""
        return FindingRow(self.code, self.fraction, self.detail, self.measures)


def _number(x: float) -> float | None:
    return None if math.isnan(x) else x


def _counts(rows: Tensor) -> dict[str, Measure]:
    return {"rows": int(rows.sum()), "of_rows": rows.numel()}


@dataclass(frozen=True)
class SideFacts:
    """What the findings read of one side's trace.

    weights: (batch, head, q_pos, k_pos); v: (batch, kv_head, k_pos, d_head); visible:
    (batch, head, q_pos, k_pos) bool, the keys a head may attend to; top_two_gaps:
    (batch, head, q_pos), each row's gap between its two largest visible scores (None with
    fewer than two keys; -inf or nan where a row sees fewer than two); max_abs_score: the
    largest finite |score|.
    """

    weights: Tensor
    v: Tensor
    head_dim: int
    visible: Tensor
    top_two_gaps: Tensor | None
    max_abs_score: float


def side_facts(trace: AttentionTrace) -> SideFacts:
    """The facts of one trace, its scores read one head at a time (one (batch, q_pos, k_pos)
    temporary at a time)."""
    visible = _visible(trace)
    scale, gaps = 0.0, []
    for h in range(trace.scores.shape[1]):
        scores = trace.scores[:, h]  # (batch, q_pos, k_pos)
        finite = scores.masked_fill(~torch.isfinite(scores), 0.0)
        if finite.numel():
            scale = max(scale, float(finite.amax()), -float(finite.amin()))
        del finite
        if scores.shape[-1] >= 2:
            masked = scores.masked_fill(~visible[:, h], float("-inf"))
            top2 = masked.topk(2, dim=-1).values  # (batch, q_pos, 2)
            del masked
            gaps.append(top2[..., 0] - top2[..., 1])  # (batch, q_pos)
    top_two_gaps = torch.stack(gaps, dim=1) if gaps else None
    return SideFacts(trace.weights, trace.v, trace.q.shape[-1], visible, top_two_gaps, scale)


def _visible(trace: AttentionTrace) -> Tensor:
    """(batch, head, q_pos, k_pos) bool: keys a head may attend to. One head at a time:
    ``isfinite`` of a float tensor makes a float copy (its absolute values) of all of it."""
    heads = trace.scores.shape[1]
    visible = torch.stack([torch.isfinite(trace.scores[:, h]) for h in range(heads)], dim=1)
    visible &= trace.weights.sum(-1, keepdim=True) > 0  # rows that see no key see nothing
    return visible


def _count(mask: Tensor) -> Tensor:
    """True entries along the last dimension. The bytes as uint8 summed into int32: summing the
    bool itself (or count_nonzero) first copies the whole matrix to int64, and ``dtype=`` still
    casts its whole input, so a (batch, head, q_pos, k_pos) mask is counted one head at a time."""
    if mask.dim() == 4:
        return torch.stack([_count(mask[:, h]) for h in range(mask.shape[1])], dim=1)
    return mask.view(torch.uint8).sum(-1, dtype=torch.int32)


def _all_heads(x: Tensor) -> Tensor:
    """(batch, head, q_pos) bool -> (batch, q_pos): true where every head agrees."""
    return x.all(dim=1)


def _rows_single_key(visible: tuple[Tensor, Tensor]) -> Tensor:
    return torch.stack([_all_heads(_count(v) == 1) for v in visible]).all(0)


def _rows_saturated_same_key(sides) -> tuple[Tensor, Tensor, float, float]:
    """Rows where all heads of both sides are one-hot on the same key.

    Returns (rows, one-hot rows whatever the key, max |score|, smallest top-two score gap).
    """
    tops = [side.weights.max(dim=-1) for side in sides]
    one_hot = torch.stack([_all_heads(top.values >= 1 - SATURATION) for top in tops]).all(0)
    keys = torch.cat([top.indices for top in tops], dim=1)  # (batch, head_a + head_b, q_pos)
    same_key = (keys == keys[:, :1]).all(dim=1)
    rows = one_hot & same_key
    scale = max(side.max_abs_score for side in sides)
    gaps = [
        gap[rows & torch.isfinite(gap)]
        for side in sides
        if side.top_two_gaps is not None
        for gap in side.top_two_gaps.unbind(1)  # (batch, q_pos) per head
    ]
    gap = min((float(g.min()) for g in gaps if g.numel()), default=float("nan"))
    return rows, one_hot, scale, gap


def _rows_uniform(sides) -> Tensor:
    """Rows where every head of both sides is uniform over its visible keys. Memory: one
    (batch, q_pos, k_pos) temporary at a time (one head)."""
    per_side = []
    for t in sides:
        seen, uniform = t.visible, []
        for h in range(t.weights.shape[1]):
            n = _count(seen[:, h]).unsqueeze(-1).clamp(min=1)  # (batch, q_pos, 1)
            deviation = t.weights[:, h] - 1.0 / n  # one temporary, then in place
            deviation.abs_().mul_(seen[:, h])
            uniform.append(deviation.amax(dim=-1) <= UNIFORM_TOL)  # (batch, q_pos)
            del deviation
        per_side.append(torch.stack(uniform).all(0))
    return torch.stack(per_side).all(0)


def _rows_identical_values(sides) -> tuple[Tensor, float]:
    """Rows whose visible value rows are all equal (on both sides); (rows, largest spread).

    The spread of a row is the largest max-norm distance from its first visible value row to
    any other visible one: zero exactly when they are all equal. Memory: two (batch, q_pos,
    k_pos) float temporaries (the distances between keys, then each row's to its first key).
    """
    per_side, spreads = [], []
    for t in sides:
        seen_by_any = t.visible.any(dim=1)  # (batch, q_pos, k_pos): visible to some head
        batch, kv_heads, k_pos, d_head = t.v.shape
        v = t.v.transpose(1, 2).reshape(batch, k_pos, kv_heads * d_head)
        distance = torch.cdist(v, v, p=float("inf"))  # (batch, k_pos, k_pos)
        first = seen_by_any.to(torch.uint8).argmax(dim=-1)  # (batch, q_pos): first visible key
        to_first = distance.gather(1, first.unsqueeze(-1).expand(-1, -1, k_pos))  # (b, q, k)
        del distance
        row_spread = to_first.mul_(seen_by_any).amax(dim=-1)  # (batch, q_pos); in place
        del to_first, seen_by_any
        tol = 1e-6 * (1.0 + float(v.abs().max()))
        per_side.append(row_spread <= tol)
        spreads.append(row_spread)
    rows = torch.stack(per_side).all(0)
    spread = float(torch.stack(spreads).amax(0)[rows].max()) if rows.any() else float("nan")
    return rows, spread


def _total_variation(a: SideFacts, b: SideFacts, rows: Tensor) -> Tensor:
    """(head_a,) mean over ``rows`` of the TV distance from each head of a to b's closest head.

    One pair of heads at a time, so memory stays at one (batch, q_pos, k_pos) temporary.
    """
    tv = torch.stack(
        [
            torch.stack(
                [
                    0.5 * (a.weights[:, i] - b.weights[:, j]).abs_().sum(-1)
                    for j in range(b.weights.shape[1])
                ],
                dim=-1,
            )  # (batch, q_pos, head_b)
            for i in range(a.weights.shape[1])
        ],
        dim=1,
    )  # (batch, head_a, q_pos, head_b)
    tv = tv.permute(0, 2, 1, 3)[rows]  # (rows, head_a, head_b)
    return tv.amin(dim=-1).mean(dim=0)


def _fraction(rows: Tensor) -> float:
    return float(rows.float().mean())


def diagnose(
    a: SideFacts, b: SideFacts, *, same_config: bool, gradients_equal: bool
) -> list[Finding]:
    """The findings for two sides of the same input (``side_facts`` of their traces), ranked by
    the share of rows they cover."""
    batch, _, q_pos, _ = a.weights.shape
    everything = torch.ones((batch, q_pos), dtype=torch.bool)
    if same_config:
        measures = {"heads": a.weights.shape[1], "head_dim": a.head_dim}
        return [Finding("same_config", 1.0, everything, measures)]
    sides = (a, b)
    # Side a is the one with more heads, so that "each head" reads naturally in the details.
    many, few = (a, b) if a.weights.shape[1] >= b.weights.shape[1] else (b, a)
    h_many, h_few = many.weights.shape[1], few.weights.shape[1]
    findings = []
    single = _rows_single_key((a.visible, b.visible))
    if single.any():
        findings.append(Finding("single_key", _fraction(single), single, _counts(single)))
    saturated, one_hot, scale, gap = _rows_saturated_same_key(sides)
    saturated = saturated & ~single
    if saturated.any():
        findings.append(
            Finding(
                "saturated_same_key",
                _fraction(saturated),
                saturated,
                {
                    **_counts(saturated),
                    "saturation": SATURATION,
                    "max_abs_score": scale,
                    "min_top_two_gap": _number(gap),
                },
            )
        )
    uniform = _rows_uniform(sides) & ~single
    if uniform.any():
        measures = {**_counts(uniform), "gradients_equal": gradients_equal}
        findings.append(Finding("uniform", _fraction(uniform), uniform, measures))
    identical, spread = _rows_identical_values(sides)
    identical = identical & ~single
    if identical.any():
        findings.append(
            Finding(
                "identical_values",
                _fraction(identical),
                identical,
                {**_counts(identical), "max_spread": _number(spread)},
            )
        )
    explained = single | saturated | uniform | identical
    partition = ~explained
    if partition.any():
        tv = _total_variation(many, few, partition)
        measures = {
            **_counts(partition),
            "heads_many": h_many,
            "head_dim_many": many.head_dim,
            "heads_few": h_few,
            "head_dim_few": few.head_dim,
            "total_variation_per_head": tv.tolist(),
            "total_variation_mean": float(tv.mean()),
            "one_hot_on_other_keys": int((partition & one_hot).sum()),
        }
        findings.append(Finding("partition", _fraction(partition), partition, measures))
    return sorted(findings, key=lambda f: -f.fraction)

"""Attention patterns kept beside the head statistics of the new kinds, for the views that draw
them (the report and the notebook displays).

``CrossPatterns``: the cross-attention weights of one source-target pair (the first of a
``model heads`` run of an encoder-decoder) for its cross-attention heads, each a (q_pos, k_pos)
= (target token, source position or bin of positions) array; for Whisper, the source positions
are 20 ms of audio each, so an alignment head draws the path of the speech through the text.
An image model's class-token rows are kept in ``VisionHeads.cls_attention`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlab.results.schema import Fields, is_number

Head = tuple[int, int]  # (layer, head)


@dataclass(frozen=True)
class CrossPatterns:
    """weights[i]: (target, source) cross-attention weights of ``heads[i]`` (layer, head) on one
    source-target pair; ``targets``: the target's tokens (queries), ``sources``: the source's
    labels (its tokens, or the time of each audio position); ``notes``: what was left out."""

    heads: list[Head]
    targets: list[str]
    sources: list[str]
    weights: list[list[list[float]]]
    notes: list[str]

    def to_dict(self) -> dict:
        return {
            "heads": [list(h) for h in self.heads],
            "targets": self.targets,
            "sources": self.sources,
            "weights": self.weights,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "cross_patterns") -> CrossPatterns:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        heads = f.heads("heads", nonempty=True)
        targets = f.get("targets", "a list of strings", strings)
        sources = f.get("sources", "a list of strings", strings)
        shape = f"{len(heads)} x {len(targets)} x {len(sources)} (head, target, source) numbers"
        weights = f.get(
            "weights", shape, lambda v: _cube(v, len(heads), len(targets), len(sources))
        )
        return cls(heads, targets, sources, weights, f.get("notes", "a list of strings", strings))


def strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


def _cube(value: object, a: int, b: int, c: int) -> bool:
    return (
        isinstance(value, list)
        and len(value) == a
        and all(
            isinstance(m, list)
            and len(m) == b
            and all(isinstance(r, list) and len(r) == c and all(map(is_number, r)) for r in m)
            for m in value
        )
    )


def cube_of(value: object, a: int, b: int) -> bool:
    """Whether ``value`` is a (a, b, n) nested list of numbers, any n (the same for all)."""
    if not (
        isinstance(value, list)
        and len(value) == a
        and value
        and isinstance(value[0], list)
        and value[0]
        and isinstance(value[0][0], list)
    ):
        return False
    return _cube(value, a, b, len(value[0][0]))

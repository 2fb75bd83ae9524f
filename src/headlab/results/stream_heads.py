"""Head statistics of the models with more than one attention kind, and their ablations.

``EncoderDecoderHeads`` (``model heads`` of an encoder-decoder, the ``model-heads-encoder-decoder``
file): one ``HeadStatistics`` per attention kind ("encoder", "decoder", "cross"), kept apart.
``KindAblation`` (``model ablate`` of an encoder-decoder or an image model, the
``model-ablate-kind`` file): the objective with and without heads of one kind.
Measured by ``headlab.heads.encoder_decoder_heads`` and ``headlab.heads.vision_heads``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headlab.results.head_statistics import HeadStatistics
from headlab.results.schema import Fields, is_int, problem

Head = tuple[int, int]  # (layer, head)


@dataclass(frozen=True)
class EncoderDecoderHeads:
    """``kinds[kind]``: the statistics of that attention kind's heads over ``n_sources``
    source-target pairs (self, prev and distance only where queries and keys share a stream)."""

    KIND: ClassVar[str] = "model-heads-encoder-decoder"

    model: str
    n_sources: int
    kinds: dict[str, HeadStatistics]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_sources": self.n_sources,
            "kinds": {kind: stats.to_dict() for kind, stats in self.kinds.items()},
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-heads-encoder-decoder"):
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        kinds = f.object("kinds", nonempty=True)
        parsed = {
            str(kind): HeadStatistics.from_dict(kinds.data[kind], f"{where}.kinds.{kind}")
            for kind in kinds.data
        }
        return cls(f.str("model"), f.int("n_sources"), parsed)


@dataclass(frozen=True)
class KindAblation:
    """``objective`` over ``n_inputs`` inputs with and without ablating ``heads`` (layer, head)
    of the attention ``kind`` (zeroed before that attention's W_O)."""

    KIND: ClassVar[str] = "model-ablate-kind"

    model: str
    n_inputs: int
    kind: str
    objective: str
    heads: list[Head]
    baseline: float
    ablated: float

    @property
    def change(self) -> float:
        """ablated - baseline: how much worse (> 0) the model is without the heads."""
        return self.ablated - self.baseline

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_inputs": self.n_inputs,
            "kind": self.kind,
            "objective": self.objective,
            "heads": [list(h) for h in self.heads],
            "baseline": self.baseline,
            "ablated": self.ablated,
            "change": self.change,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-ablate-kind") -> KindAblation:
        """The inverse of ``to_dict`` (``change`` is derived); ValueError naming a bad field."""
        f = Fields(data, where)
        heads = []
        for i, pair in enumerate(f.list("heads")):
            if not (isinstance(pair, list) and len(pair) == 2 and all(map(is_int, pair))):
                raise problem(f"{where}.heads[{i}]", "[layer, head]", pair)
            heads.append((pair[0], pair[1]))
        return cls(f.str("model"), f.int("n_inputs"), f.str("kind"), f.str("objective"), heads,
                   f.number("baseline"), f.number("ablated"))  # fmt: skip

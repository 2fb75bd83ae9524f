"""Head statistics of the models with more than one attention kind, and their ablations.

``EncoderDecoderHeads`` (``model heads`` of an encoder-decoder, the ``model-heads-encoder-decoder``
file): one ``HeadStatistics`` per attention kind ("encoder", "decoder", "cross"), kept apart.
``VisionHeads`` (``model heads`` of an image model, the ``model-heads-vision`` file): per-head
statistics over patches and the high-norm tokens.
``KindAblation`` (``model ablate`` of an encoder-decoder or an image model, the
``model-ablate-kind`` file): the objective with and without heads of one kind.
Measured by ``headlab.heads.encoder_decoder_heads`` and ``headlab.heads.vision_heads``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from headlab.results.head_statistics import HeadStatistics
from headlab.results.kind_views import CrossPatterns, cube_of
from headlab.results.schema import Fields, are_short_texts, is_int, is_number

Head = tuple[int, int]  # (layer, head)


@dataclass(frozen=True)
class EncoderDecoderHeads:
    """``kinds[kind]``: the statistics of that attention kind's heads over ``n_sources``
    source-target pairs (self, prev and distance only where queries and keys share a stream);
    ``cross_patterns``: the first pair's cross-attention weights of some heads (None in files
    written before they were kept)."""

    KIND: ClassVar[str] = "model-heads-encoder-decoder"

    model: str
    n_sources: int
    kinds: dict[str, HeadStatistics]
    cross_patterns: CrossPatterns | None = None

    def to_dict(self) -> dict:
        out = {
            "model": self.model,
            "n_sources": self.n_sources,
            "kinds": {kind: stats.to_dict() for kind, stats in self.kinds.items()},
        }
        if self.cross_patterns is not None:
            out["cross_patterns"] = self.cross_patterns.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-heads-encoder-decoder"):
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        kinds = f.object("kinds", nonempty=True)
        parsed = {
            str(kind): HeadStatistics.from_dict(kinds.data[kind], f"{where}.kinds.{kind}")
            for kind in kinds.data
        }
        patterns = None
        if data.get("cross_patterns") is not None:
            patterns = CrossPatterns.from_dict(data["cross_patterns"], f.at("cross_patterns"))
        return cls(f.str("model"), f.int("n_sources"), parsed, patterns)


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
        heads = f.heads("heads")
        return cls(
            f.str("model"),
            f.int("n_inputs"),
            f.str("kind"),
            f.str("objective"),
            heads,
            f.number("baseline"),
            f.number("ablated"),
        )


@dataclass(frozen=True)
class VisionHeads:
    """Per-head statistics of an image encoder over ``n_images`` images and its high-norm
    tokens (``headlab.heads.vision_heads`` describes them).

    grid: (rows, cols) of patches; registers: the register tokens' positions; threshold: the
    multiple of the median patch norm above which a patch token is high-norm; metrics[name]:
    (layer, head) grids; norm_ratios: (image, layer + 1, token) each token's norm over its
    image's median patch norm at each block's input and the output (empty when the images
    have different token counts, with a note); cls_attention: (layer, head, k_pos) the first
    image's class-token query row of every head (empty in files written before it was kept).
    """

    KIND: ClassVar[str] = "model-heads-vision"

    model: str
    n_images: int
    num_layers: int
    num_heads: int
    grid: list[int]
    registers: list[int]
    threshold: float
    metrics: dict[str, list[list[float]]]
    norm_ratios: list[list[list[float]]]
    notes: list[str]
    cls_attention: list[list[list[float]]] = field(default_factory=list)

    def high_norm_tokens(self, layer: int) -> list[list[int]]:
        """Each image's high-norm patch tokens at ``layer``'s input (``num_layers``: output)."""
        first = 1 + len(self.registers)
        return [
            [t for t, r in enumerate(image[layer]) if t >= first and r > self.threshold]
            for image in self.norm_ratios
        ]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_images": self.n_images,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "grid": self.grid,
            "registers": self.registers,
            "threshold": self.threshold,
            "metrics": self.metrics,
            "norm_ratios": self.norm_ratios,
            "notes": self.notes,
            "cls_attention": self.cls_attention,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-heads-vision") -> VisionHeads:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        layers, heads = f.size("num_layers"), f.size("num_heads")
        group = f.object("metrics", nonempty=True)
        metrics = {str(k): group.grid(k, layers, heads) for k in group.data}
        widest = max(len(row) for grid in metrics.values() for row in grid)
        f.held("num_heads", heads, widest, "the heads of the widest layer its grids hold")
        grid = f.get(
            "grid",
            "[rows, cols]",
            lambda v: isinstance(v, list) and len(v) == 2 and all(is_int(x) and x >= 1 for x in v),
        )
        registers = f.get(
            "registers",
            "a list of token positions",
            lambda v: isinstance(v, list) and all(is_int(x) for x in v),
        )
        ratios = f.get("norm_ratios", "(image, layer + 1, token) numbers", _cube(layers + 1))
        notes = f.get("notes", "a list of strings", are_short_texts)
        rows = []
        if data.get("cls_attention"):
            rows = f.get(
                "cls_attention",
                f"{layers} x {heads} x tokens (layer, head, key) numbers",
                lambda v: cube_of(v, layers, heads),
            )
        return cls(
            f.str("model"),
            f.int("n_images"),
            layers,
            heads,
            grid,
            registers,
            f.number("threshold", low=1.0),
            metrics,
            ratios,
            notes,
            rows,
        )


def _cube(layers: int):
    def ok(value: object) -> bool:
        return isinstance(value, list) and all(
            isinstance(image, list)
            and len(image) == layers
            and all(isinstance(row, list) and all(is_number(x) for x in row) for row in image)
            for image in value
        )

    return ok

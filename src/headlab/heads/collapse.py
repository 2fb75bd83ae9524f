"""The seed question on a trained model: the same weights viewed with fewer heads.

Viewing a layer's attention as h heads (MultiHeadAttention.with_num_heads) keeps every parameter
and changes only how Q, K and V are split: h softmaxes over wider blocks instead of 12 over
blocks of 32. Each variant embeds the corpus; we report the mean cosine of each text's embedding
to the original one and the share of texts whose nearest neighbour in the corpus is unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from headlab.heads.compare import mean_cosine, nn_agreement
from headlab.models import Encoder

DEFAULT_HEAD_COUNTS = (1, 2, 3, 4, 6, 12)


@dataclass(frozen=True)
class CollapseRow:
    """One variant: ``layer`` None means every layer was viewed as ``num_heads`` heads."""

    num_heads: int
    mean_cosine: float
    nn_agreement: float
    layer: int | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.layer is None:
            del d["layer"]
        return d


@dataclass(frozen=True)
class CollapseResult:
    model: str
    n_texts: int
    all_layers: list[CollapseRow]
    per_layer: list[CollapseRow]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_texts": self.n_texts,
            "all_layers": [r.to_dict() for r in self.all_layers],
            "per_layer": [
                {"layer": r.layer, **{k: v for k, v in r.to_dict().items() if k != "layer"}}
                for r in self.per_layer
            ],
        }


def collapse_heads(
    encoder: Encoder,
    texts: list[str],
    head_counts: tuple[int, ...] = DEFAULT_HEAD_COUNTS,
    *,
    per_layer_heads: int = 1,
    batch_size: int = 32,
    max_length: int = 128,
) -> CollapseResult:
    """Embed ``texts`` with every layer viewed as each of ``head_counts`` heads, then with one
    layer at a time viewed as ``per_layer_heads``; compare with the original embeddings.

    Needs at least 2 texts. Raises ValueError for a head count that does not divide the width.
    """
    if len(texts) < 2:
        raise ValueError(f"expected at least 2 texts, got {len(texts)}")

    def row(variant: Encoder, num_heads: int, layer: int | None) -> CollapseRow:
        emb = variant.embed(texts, batch_size, max_length=max_length)
        return CollapseRow(
            num_heads, mean_cosine(original, emb), nn_agreement(original, emb), layer
        )

    original = encoder.embed(texts, batch_size, max_length=max_length)
    all_layers = [row(encoder.with_num_heads(h), h, None) for h in head_counts]
    per_layer = [
        row(encoder.with_num_heads(per_layer_heads, [layer]), per_layer_heads, layer)
        for layer in range(encoder.num_layers)
    ]
    return CollapseResult(encoder.name, len(texts), all_layers, per_layer)

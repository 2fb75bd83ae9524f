"""The result of ``headlab.circuits.score_split``: why a head attends where it does.

``ScoreSplitResult`` (KIND "score-split"): for one head (``layer``, ``head``, its K/V group
``kv_group``) of ``model`` on the text ``tokens``, one ``PairSplit`` per chosen (query, key)
pair. A pair's kernel ``score`` is ``raw + softcap_term + bias_term``; ``raw`` = scale * q . k is
the sum of its pair matrix over every (query-side, key-side) component (``components``; the
query side and the key side each add the q/k maps' constant "qk-bias"). A pair keeps:

- ``query_marginal`` and ``key_marginal``: the pair matrix summed over the other side, one value
  per component (each list sums to ``raw``);
- ``pair_rows`` x ``pair_cols`` and ``pair``: the pair matrix on the components that matter most
  on each side, with a last row and column "rest" for all the others (it still sums to ``raw``);
- ``sources``: for the head components that add most to the key side, that head's key-side term
  split by the source position it read (``SourceSplit``: positions, values; the values sum to
  the component's key-side term).

``attention``: "self" (the head's own stream on both sides), or "cross" (an encoder-decoder's
cross-attention: the query side reads the decoder's stream, the key side the encoder's). A
cross split names the key side's own components (``key_components``: the encoder's,
"enc."-prefixed, and "qk-bias") and its positions' labels (``key_tokens``: the source's tokens,
or the times of an audio window's positions); ``key_names()`` and ``key_labels(batch)`` give
either side's whatever the attention.

``frozen``: the norms are held at the run's scales (the split is exact given them); ``recomputed``
per pair, where measured: per key-side component, the score's change when that component is
taken out of the key input with the norms recomputed (vs the frozen term). ``grid``: on an
image, its patch grid (rows, cols) and the position of its first patch ``first_patch`` (the
class token and the registers come before it; the patches follow row by row); None on a text.
Plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headlab.results.schema import Fields

REST = "rest"
#: What a split's head attends with: its own stream, or an encoder-decoder's cross-attention.
ATTENTIONS = ("self", "cross")


@dataclass(frozen=True)
class SourceSplit:
    """A head component's key-side term split by the positions it read."""

    component: str
    positions: list[int]
    values: list[float]

    def to_dict(self) -> dict:
        return {
            "component": self.component,
            "positions": list(self.positions),
            "values": list(self.values),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "source") -> SourceSplit:
        fields = Fields(data, where)
        positions = [int(p) for p in fields.list("positions")]
        values = fields.numbers("values")
        if len(positions) != len(values):
            raise ValueError(f"{where}: positions and values must have one length")
        return cls(fields.str("component"), positions, values)


@dataclass(frozen=True)
class PairSplit:
    """One (query, key) pair of text ``batch`` (see the module docstring)."""

    batch: int
    query: int
    key: int
    score: float | None
    raw: float
    softcap_term: float
    bias_term: float | None
    query_marginal: list[float]
    key_marginal: list[float]
    pair_rows: list[str]
    pair_cols: list[str]
    pair: list[list[float]]
    sources: list[SourceSplit] = field(default_factory=list)
    recomputed: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "query": self.query,
            "key": self.key,
            "score": self.score,
            "raw": self.raw,
            "softcap_term": self.softcap_term,
            "bias_term": self.bias_term,
            "query_marginal": list(self.query_marginal),
            "key_marginal": list(self.key_marginal),
            "pair_rows": list(self.pair_rows),
            "pair_cols": list(self.pair_cols),
            "pair": [list(r) for r in self.pair],
            "sources": [s.to_dict() for s in self.sources],
            "recomputed": list(self.recomputed),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "pair") -> PairSplit:
        fields = Fields(data, where)
        optional = {
            k: (None if data.get(k) is None else fields.number(k)) for k in ("score", "bias_term")
        }
        rows, cols = fields.list("pair_rows"), fields.list("pair_cols")
        return cls(
            batch=fields.int("batch"),
            query=fields.int("query"),
            key=fields.int("key"),
            raw=fields.number("raw"),
            softcap_term=fields.number("softcap_term"),
            query_marginal=fields.numbers("query_marginal"),
            key_marginal=fields.numbers("key_marginal"),
            pair_rows=[str(r) for r in rows],
            pair_cols=[str(c) for c in cols],
            pair=fields.grid("pair", len(rows), len(cols)),
            sources=[SourceSplit.from_dict(s.data, s.where) for s in fields.objects("sources")],
            recomputed=fields.numbers("recomputed") if "recomputed" in data else [],
            **optional,
        )


@dataclass(frozen=True, repr=False)
class ScoreSplitResult:
    """See the module docstring. ``keys``: how the keys were chosen ("attended", "top-3",
    "induction", ...); ``components``: the components of both sides (the query side's and the
    key side's marginals are indexed by it)."""

    KIND = "score-split"

    model: str
    layer: int
    head: int
    kv_group: int
    keys: str
    tokens: list[list[str]]
    components: list[str]
    scale: float
    softcap: float | None
    pairs: list[PairSplit]
    frozen: str = "norm scales held at the run's values (one per position, and per head)"
    attention: str = "self"
    key_components: list[str] | None = None
    key_tokens: list[str] | None = None
    grid: tuple[int, int] | None = None
    first_patch: int | None = None

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if (self.attention == "cross") != (self.key_components is not None):
            raise ValueError("a cross split, and only one, names its key side's components")

    def key_names(self) -> list[str]:
        """The key side's components (the query side's, but in a cross split)."""
        return self.components if self.key_components is None else self.key_components

    def key_labels(self, batch: int = 0) -> list[str]:
        """The labels of the key positions of text ``batch``."""
        return self.tokens[batch] if self.key_tokens is None else self.key_tokens

    def __repr__(self) -> str:
        pairs = ", ".join(f"{p.query}->{p.key}" for p in self.pairs[:4])
        more = ", ..." if len(self.pairs) > 4 else ""
        return (
            f"ScoreSplitResult({self.model!r}, head {self.layer}.{self.head}: "
            f"{len(self.pairs)} pairs ({self.keys} keys: {pairs}{more}), "
            f"{len(self.components)} components)"
        )

    def key_shares(self) -> dict[str, float]:
        """Each component's key-side term summed over the pairs."""
        out = dict.fromkeys(self.key_names(), 0.0)
        for pair in self.pairs:
            for name, value in zip(self.key_names(), pair.key_marginal, strict=True):
                out[name] += value
        return out

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "layer": self.layer,
            "head": self.head,
            "kv_group": self.kv_group,
            "keys": self.keys,
            "tokens": [list(t) for t in self.tokens],
            "components": list(self.components),
            "scale": self.scale,
            "softcap": self.softcap,
            "pairs": [p.to_dict() for p in self.pairs],
            "frozen": self.frozen,
            "attention": self.attention,
            "key_components": None if self.key_components is None else list(self.key_components),
            "key_tokens": None if self.key_tokens is None else list(self.key_tokens),
            "grid": None if self.grid is None else list(self.grid),
            "first_patch": self.first_patch,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = KIND) -> ScoreSplitResult:
        fields = Fields(data, where)
        components = [str(c) for c in fields.list("components", nonempty=True)]
        pairs = [PairSplit.from_dict(p.data, p.where) for p in fields.objects("pairs")]
        attention = fields.str("attention") if data.get("attention") is not None else "self"
        keyed = None
        if data.get("key_components") is not None:
            keyed = [str(c) for c in fields.list("key_components", nonempty=True)]
        key_tokens = None
        if data.get("key_tokens") is not None:
            key_tokens = [str(t) for t in fields.list("key_tokens")]
        for pair in pairs:
            for side, names in ((pair.query_marginal, components), (pair.key_marginal, keyed)):
                names = components if names is None else names
                if len(side) != len(names):
                    raise ValueError(
                        f"{where}: a marginal has {len(side)} values for {len(names)} components"
                    )
        grid, first_patch = None, None
        if data.get("grid") is not None:  # an image (files of texts, and older files, have none)
            grid = tuple(int(n) for n in fields.list("grid"))
            first_patch = fields.int("first_patch")
            if len(grid) != 2 or min(grid) < 1:
                raise ValueError(f"{where}: grid must be [rows, cols] >= 1, got {list(grid)}")
        return cls(
            model=fields.str("model"),
            layer=fields.int("layer"),
            head=fields.int("head"),
            kv_group=fields.int("kv_group"),
            keys=fields.str("keys"),
            tokens=[[str(t) for t in row] for row in fields.list("tokens")],
            components=components,
            scale=fields.number("scale"),
            softcap=None if data.get("softcap") is None else fields.number("softcap"),
            pairs=pairs,
            frozen=fields.str("frozen"),
            attention=attention,
            key_components=keyed,
            key_tokens=key_tokens,
            grid=grid,
            first_patch=first_patch,
        )


__all__ = ["ATTENTIONS", "REST", "PairSplit", "ScoreSplitResult", "SourceSplit"]

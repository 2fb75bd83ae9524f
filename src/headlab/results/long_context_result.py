"""The ``model-long-context`` results file: one long text's head statistics, heavy hitters,
findings, roles and maps (``headlab.heads.long_context`` measures them), and
``LongContextStatistics``, what ``long_text_statistics`` returns: that file's content
(``result()``) with the tokens and the attention each key receives beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from headlab.results.attention_maps_result import AttentionMaps
from headlab.results.head_roles import HeadRoles
from headlab.results.head_statistics import HeadStatistics
from headlab.results.schema import Fields, is_int, is_number, problem


@dataclass(frozen=True)
class TextContext:
    """The text as analysed: n_tokens after the cut to ``max_tokens``, text_tokens before it (a
    lower bound when the text was cut: only the start the cut needs is tokenised)."""

    n_tokens: int
    text_tokens: int
    truncated: bool

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> TextContext:
        return cls(f.int("n_tokens", 2), f.int("text_tokens", 2), f.bool("truncated"))


@dataclass(frozen=True)
class HeavyHitters:
    """Per head, apart from the key positions ``excluded_positions`` (the special ones):
    top_share (layer, head), the part of the attention to the other keys that their top 1%
    receive; top_keys (layer, head, <= TOP_KEYS_KEPT) those key positions, most attended first."""

    top_share: list[list[float]]
    top_keys: list[list[list[int]]]
    excluded_positions: list[int]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields, layers: int, heads: int, n_tokens: int) -> HeavyHitters:
        """ValueError naming the field unless the grids are layers x heads and every position
        is one of the ``n_tokens`` keys."""
        share = f.grid("top_share", layers, heads)
        rows = f.get("top_keys", f"{layers} rows (layer)", lambda v: isinstance(v, list))
        if len(rows) != layers:
            raise problem(f.at("top_keys"), f"{layers} rows (layer)", f"{len(rows)} rows")
        top_keys = []
        for layer, row in enumerate(rows):
            at = f"{f.at('top_keys')}[{layer}]"
            if not isinstance(row, list) or len(row) != heads:
                raise problem(at, f"{heads} lists of key positions (head)", row)
            top_keys.append(
                [_positions(keys, f"{at}[{h}]", n_tokens) for h, keys in enumerate(row)]
            )
        excluded = _positions(f.list("excluded_positions"), f.at("excluded_positions"), n_tokens)
        return cls(share, top_keys, excluded)


def _positions(value: object, where: str, n_tokens: int) -> list[int]:
    """A list of key positions, each an integer in [0, n_tokens)."""
    if not isinstance(value, list):
        raise problem(where, "a list of key positions", value)
    for i, v in enumerate(value):
        if not (is_int(v) and 0 <= v < n_tokens):
            raise problem(f"{where}[{i}]", f"a key position in [0, {n_tokens})", v)
    return list(value)


@dataclass(frozen=True)
class LongContextFindings:
    """What the long-context literature reports (``long_context_findings``): ``sinks`` of
    ``heads`` heads put more than ``sink_threshold`` of their weight on the first token
    (sink_share = sinks / heads); each layer's mean attention distance (tokens); the
    ``most_concentrated`` heads as [layer, head, top_share], most concentrated first."""

    sink_threshold: float
    sink_share: float
    sinks: int
    heads: int
    mean_distance_per_layer: list[float]
    most_concentrated: list[list]  # [layer, head, share] (a JSON triple)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields, layers: int, heads: int) -> LongContextFindings:
        concentrated = []
        for i, cell in enumerate(f.list("most_concentrated")):
            ok = (
                isinstance(cell, list)
                and len(cell) == 3
                and is_int(cell[0])
                and 0 <= cell[0] < layers
                and is_int(cell[1])
                and 0 <= cell[1] < heads
                and is_number(cell[2])
            )
            if not ok:
                where = f"{f.at('most_concentrated')}[{i}]"
                raise problem(where, f"[layer < {layers}, head < {heads}, share]", cell)
            concentrated.append([cell[0], cell[1], float(cell[2])])
        distances = f.numbers("mean_distance_per_layer")
        if len(distances) != layers:
            got = f"{len(distances)} numbers"
            raise problem(f.at("mean_distance_per_layer"), f"{layers} numbers (layer)", got)
        return cls(
            sink_threshold=f.number("sink_threshold", 0.0, 1.0),
            sink_share=f.number("sink_share", 0.0, 1.0),
            sinks=f.int("sinks"),
            heads=f.int("heads"),
            mean_distance_per_layer=distances,
            most_concentrated=concentrated,
        )


@dataclass(frozen=True)
class LongContextResult:
    """The results file of one long text: the statistics of ``head_statistics`` (their fields
    at the top level), its ``context``, ``heavy_hitters`` and ``findings``, and (files written
    since head roles exist) ``roles`` and ``maps``."""

    KIND: ClassVar[str] = "model-long-context"

    statistics: HeadStatistics
    context: TextContext
    heavy_hitters: HeavyHitters
    findings: LongContextFindings
    roles: HeadRoles | None = None
    maps: AttentionMaps | None = None

    def __repr__(self) -> str:
        """One line: the text's length and the heads' roles (every number is in ``to_dict``)."""
        counts = {} if self.roles is None else self.roles.counts()
        roles = ", ".join(f"{n} {r}" for r, n in counts.items()) or "no roles"
        return (
            f"LongContextResult({self.statistics.model!r}, {self.context.n_tokens} tokens, "
            f"{self.statistics.num_layers} x {self.statistics.num_heads} heads: {roles})"
        )

    def to_dict(self) -> dict:
        out = {
            **self.statistics.to_dict(),
            "context": self.context.to_dict(),
            "heavy_hitters": self.heavy_hitters.to_dict(),
            "findings": self.findings.to_dict(),
        }
        if self.roles is not None:
            out["roles"] = self.roles.to_dict()
        if self.maps is not None:
            out["maps"] = self.maps.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-long-context") -> LongContextResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        statistics = HeadStatistics.from_dict(data, where)
        layers, heads = statistics.num_layers, statistics.num_heads
        f = Fields(data, where)
        context = TextContext.from_dict(f.object("context"))
        heavy = HeavyHitters.from_dict(f.object("heavy_hitters"), layers, heads, context.n_tokens)
        findings = LongContextFindings.from_dict(f.object("findings"), layers, heads)
        roles = maps = None
        if "roles" in data:
            roles = HeadRoles.from_dict(f.object("roles"), layers, heads)
        if "maps" in data:
            maps = AttentionMaps.from_dict(f.object("maps"), layers, heads)
            maps.check_length(context.n_tokens, f.at("maps"))
        return cls(statistics, context, heavy, findings, roles, maps)


@dataclass(frozen=True, eq=False)  # eq: a NumPy array has no single truth value
class LongContextStatistics:
    """What ``headlab.heads.long_context.long_text_statistics`` measured on one text, as plain
    data. ``result()`` is what the results file holds (``LongContextResult``: written with its
    ``to_dict``, read with its ``from_dict``); the tokens and ``received`` are not written.

    statistics: as ``head_statistics`` gives (n_texts = 1); received: (layer, head, k_pos)
    float64, the attention each key receives summed over the queries (``heads.long_context
    .heavy_hitters`` reduces it, apart from any key positions); tokens: the text's token
    strings as analysed; text_tokens: the text's length before the cut; special: the model's
    special key positions in this text (the first token, and any other position the model
    names); heavy_hitters and findings: the heavy hitters apart from ``special`` and what the
    literature reports of them; roles: each head's role and scores; maps: its blocked map and
    received profile (None when not measured).
    """

    statistics: HeadStatistics
    received: np.ndarray
    tokens: list[str]
    text_tokens: int
    special: list[int]
    heavy_hitters: HeavyHitters
    findings: LongContextFindings
    roles: HeadRoles | None = None
    maps: AttentionMaps | None = None

    @property
    def truncated(self) -> bool:
        return self.text_tokens > len(self.tokens)

    @property
    def context(self) -> TextContext:
        return TextContext(len(self.tokens), self.text_tokens, self.truncated)

    def result(self) -> LongContextResult:
        """What the results file holds."""
        return LongContextResult(
            self.statistics, self.context, self.heavy_hitters, self.findings, self.roles, self.maps
        )

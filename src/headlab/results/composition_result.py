"""The result of ``headlab.circuits.composition``: scores of every head pair, with baselines.

``CompositionScores`` (KIND "circuit-composition"): per mode a matrix indexed (sender head,
receiver head) for "q", "k", "v" and (sender head, receiver K/V group) for "k_group", "v_group";
heads and groups are counted across layers in order (``head_names``, ``group_names``: "L.H" and
"L.gG"), and an entry is null where the pair is not a sender in an earlier layer or the receiver
has no such weights (``missing`` says why, per layer). Plain data: ``to_dict`` and a validating
``from_dict``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from headlab.results.node_names import group_name, head_name
from headlab.results.schema import Fields, problem
from headlab.results.summary_repr import summarised

MATRIX_MODES = ("q", "k", "v")
GROUP_MATRIX_MODES = ("k_group", "v_group")
ALL_MODES = MATRIX_MODES + GROUP_MATRIX_MODES


@dataclass(frozen=True)
class Baseline:
    """The score of random matrices of one set of shapes: mean and std of each mode over
    ``samples`` draws from ``seed``."""

    embed_dim: int
    sender_d_head: int
    receiver_d_head: int
    group_size: int
    samples: int
    seed: int
    mean: dict[str, float]
    std: dict[str, float]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "baseline") -> Baseline:
        fields = Fields(data, where)
        stats = {}
        for name in ("mean", "std"):
            got = fields.object(name)
            stats[name] = {m: got.number(m, 0.0, 1.0) for m in ALL_MODES if m in got.data}
        return cls(
            embed_dim=fields.size("embed_dim"),
            sender_d_head=fields.size("sender_d_head"),
            receiver_d_head=fields.size("receiver_d_head"),
            group_size=fields.size("group_size"),
            samples=fields.int("samples", 1),
            seed=fields.int("seed"),
            **stats,
        )


@summarised
@dataclass(frozen=True)
class CompositionScores:
    """See the module docstring. ``folded_layers``: the layers whose input-norm scale is folded
    into their W_Q, W_K, W_V; ``folded`` / ``not_folded`` / ``rotary``: what the scores include,
    in words."""

    KIND = "circuit-composition"

    model: str
    heads_per_layer: list[int]
    kv_heads_per_layer: list[int]
    scores: dict[str, list[list[float | None]]]
    baselines: list[Baseline]
    folded_layers: list[int]
    folded: str
    not_folded: str
    rotary: str
    missing: dict[str, str] = field(default_factory=dict)
    #: the relative offsets of rotary-aware scores (``rotary`` says how); empty: without rotary
    rotary_offsets: list[int] = field(default_factory=list)

    # ------------------------------------------------------------------ names
    def head_names(self) -> list[str]:
        return [head_name(i, h) for i, n in enumerate(self.heads_per_layer) for h in range(n)]

    def group_names(self) -> list[str]:
        return [group_name(i, g) for i, n in enumerate(self.kv_heads_per_layer) for g in range(n)]

    def score(self, mode: str, sender: str, receiver: str) -> float | None:
        """The score of ``sender`` ("L.H") into ``receiver`` ("L.H", or "L.gG" for the group
        modes); ValueError naming an unknown mode or name."""
        if mode not in ALL_MODES:
            raise ValueError(f"mode must be one of {', '.join(ALL_MODES)}, got {mode!r}")
        rows = self.head_names()
        cols = self.group_names() if mode in GROUP_MATRIX_MODES else rows
        for name, names in ((sender, rows), (receiver, cols)):
            if name not in names:
                raise ValueError(f"no head or group {name!r} for mode {mode!r} in {self.model}")
        return self.scores[mode][rows.index(sender)][cols.index(receiver)]

    def top_receivers(self, mode: str, sender: str, n: int = 5) -> list[tuple[str, float]]:
        """The ``n`` receivers ``sender`` composes with most in ``mode``, highest first."""
        rows = self.head_names()
        if sender not in rows:
            raise ValueError(f"no head {sender!r} in {self.model}")
        cols = self.group_names() if mode in GROUP_MATRIX_MODES else rows
        row = self.scores[mode][rows.index(sender)]
        found = [(name, v) for name, v in zip(cols, row, strict=True) if v is not None]
        return sorted(found, key=lambda item: -item[1])[:n]

    def baseline_for(self, mode: str) -> float:
        """The mean random baseline of ``mode`` (the first set of shapes: every layer's, when
        the model's layers share their sizes)."""
        if not self.baselines:
            raise ValueError(f"{self.model} has no pair of layers, so no baseline")
        return self.baselines[0].mean[mode]

    # ------------------------------------------------------------------ plain data
    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "heads_per_layer": list(self.heads_per_layer),
            "kv_heads_per_layer": list(self.kv_heads_per_layer),
            "scores": self.scores,
            "baselines": [b.to_dict() for b in self.baselines],
            "folded_layers": list(self.folded_layers),
            "folded": self.folded,
            "not_folded": self.not_folded,
            "rotary": self.rotary,
            "missing": dict(self.missing),
            "rotary_offsets": list(self.rotary_offsets),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = KIND) -> CompositionScores:
        fields = Fields(data, where)
        heads = [int(v) for v in fields.numbers("heads_per_layer")]
        kv_heads = [int(v) for v in fields.numbers("kv_heads_per_layer")]
        if len(kv_heads) != len(heads):
            raise problem(fields.at("kv_heads_per_layer"), f"{len(heads)} counts", kv_heads)
        total, groups = sum(heads), sum(kv_heads)
        got = fields.object("scores")
        scores = {}
        for mode in ALL_MODES:
            cols = groups if mode in GROUP_MATRIX_MODES else total
            scores[mode] = _matrix(got.list(mode), got.at(mode), total, cols)
        missing = fields.object("missing")
        return cls(
            model=fields.name("model"),
            heads_per_layer=heads,
            kv_heads_per_layer=kv_heads,
            scores=scores,
            baselines=[Baseline.from_dict(b.data, b.where) for b in fields.objects("baselines")],
            folded_layers=[int(v) for v in fields.numbers("folded_layers")],
            folded=fields.str("folded"),
            not_folded=fields.str("not_folded"),
            rotary=fields.str("rotary"),
            missing={key: missing.str(key) for key in missing.data},
            rotary_offsets=[int(v) for v in fields.numbers("rotary_offsets")]
            if "rotary_offsets" in data
            else [],
        )


def _matrix(value: list, where: str, rows: int, cols: int) -> list[list[float | None]]:
    """A rows x cols matrix of numbers in [0, 1] or nulls."""
    if len(value) != rows:
        raise problem(where, f"{rows} rows", f"{len(value)} rows")
    out = []
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != cols:
            raise problem(f"{where}[{i}]", f"a row of {cols} entries", row)
        for j, v in enumerate(row):
            ok = v is None or (
                isinstance(v, int | float) and not isinstance(v, bool) and 0.0 <= v <= 1.0
            )
            if not ok:
                raise problem(f"{where}[{i}][{j}]", "a number in [0, 1] or null", v)
        out.append([None if v is None else float(v) for v in row])
    return out

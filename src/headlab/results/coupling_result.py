"""The results of ``headlab.analysis.coupling`` and ``analysis.grad``: per-head gradient norms,
coupling matrices, one side of a coupling comparison (``headlab grad`` prints them; ``--json``
writes ``to_dict``; ``from_dict`` reads it back, refusing a document off the schema with the
field, the expected and the received value). Plain NumPy, no torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from headlab.results.schema import Fields, is_number, problem

NORMS = ("w_q", "w_k", "w_v", "w_o")


def _square(f: Fields, key: str, size: int | None = None) -> list[list[float]]:
    """A (block, block) matrix of finite numbers; ``size`` x ``size`` when given."""
    rows = f.get(key, "a list of rows", lambda v: isinstance(v, list))
    size = len(rows) if size is None else size
    if len(rows) != size:
        raise problem(f.at(key), f"{size} x {size} (block x block) numbers", f"{len(rows)} rows")
    matrix = []
    for i, row in enumerate(rows):
        where = f"{f.at(key)}[{i}]"
        if not isinstance(row, list) or len(row) != size:
            raise problem(where, f"{size} numbers (a {size} x {size} matrix)", row)
        for j, v in enumerate(row):
            if not is_number(v):
                raise problem(f"{where}[{j}]", "a finite number", v)
        matrix.append([float(v) for v in row])
    return matrix


def _norms(f: Fields) -> dict[str, list[float]]:
    """Each projection's per-head gradient norms: finite numbers >= 0, one per head each."""
    norms = {name: f.numbers(name) for name in NORMS}
    heads = len(norms["w_q"])
    for name, values in norms.items():
        if len(values) != heads or any(v < 0 for v in values):
            raise problem(f.at(name), f"{heads} numbers >= 0 (head)", values)
    return norms


@dataclass(frozen=True)
class HeadGradientNorms:
    """Frobenius norms of each head's block of the weight gradients, shape (head,) each."""

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray

    def to_dict(self) -> dict[str, list[float]]:
        return {k: getattr(self, k).tolist() for k in NORMS}

    @classmethod
    def from_dict(cls, f: Fields) -> HeadGradientNorms:
        return cls(**{name: np.array(values) for name, values in _norms(f).items()})


@dataclass(frozen=True)
class CouplingMatrix:
    """One coupling matrix (blocks, blocks) with its title and largest off-diagonal entry."""

    title: str
    matrix: np.ndarray
    off_diagonal_max: float

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "matrix": self.matrix.tolist(),
            "off_diagonal_max": self.off_diagonal_max,
        }

    @classmethod
    def from_dict(cls, f: Fields) -> CouplingMatrix:
        matrix = np.array(_square(f, "matrix"))
        return cls(f.str("title"), matrix, f.number("off_diagonal_max"))


@dataclass(frozen=True)
class CouplingSummary:
    """``gradient_coupling`` of a seeded module with ``num_heads`` heads and of its 1-head view
    (same weights, cut into the same ``num_heads`` blocks)."""

    d_model: int
    num_heads: int
    seq_len: int
    matrices: list[CouplingMatrix]

    def to_dict(self) -> dict:
        return {
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "seq_len": self.seq_len,
            "matrices": [m.to_dict() for m in self.matrices],
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "coupling") -> CouplingSummary:
        f = Fields(data, where)
        matrices = [CouplingMatrix.from_dict(m) for m in f.objects("matrices")]
        return cls(f.size("d_model"), f.size("num_heads"), f.size("seq_len"), matrices)


@dataclass(frozen=True)
class CouplingSide:
    """One head count: the (block, block) coupling matrix and the per-head gradient norms."""

    num_heads: int
    kind: str  # "" for plain heads, " (talking heads)" for the talking-heads side
    coupling: list[list[float]]
    off_diagonal_max: float
    diagonal_mean: float
    head_gradient_norms: dict[str, list[float]]

    @classmethod
    def from_dict(cls, f: Fields, blocks: int) -> CouplingSide:
        """ValueError naming the field unless the coupling is ``blocks`` x ``blocks`` and the
        norms have one number per head."""
        kind = f.get("kind", '"" or " (talking heads)"', lambda v: v in ("", " (talking heads)"))
        norms = _norms(f.object("head_gradient_norms"))
        heads = f.size("num_heads")
        if len(norms["w_q"]) != heads:
            where = f.at("head_gradient_norms")
            raise problem(f"{where}.w_q", f"{heads} numbers (head)", norms["w_q"])
        return cls(
            heads,
            kind,
            _square(f, "coupling", blocks),
            f.number("off_diagonal_max"),
            f.number("diagonal_mean"),
            norms,
        )


@dataclass(frozen=True)
class CouplingComparison:
    """Both sides of a set-up, measured over ``blocks`` = max(heads, vs_heads) blocks."""

    setup: dict  # the ``CompareRequest`` measured, as its ``to_dict`` gives it
    blocks: int
    sides: list[CouplingSide]
    talking_heads: float = 0.0

    def to_dict(self) -> dict:
        """The JSON document: {setup, blocks, talking_heads, sides: [{num_heads, kind, coupling,
        off_diagonal_max, diagonal_mean, head_gradient_norms}]}."""
        return {
            "setup": dict(self.setup),
            "blocks": self.blocks,
            "talking_heads": self.talking_heads,
            "sides": [asdict(side) for side in self.sides],
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "grad") -> CouplingComparison:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit (two
        sides, each with a ``blocks`` x ``blocks`` coupling)."""
        f = Fields(data, where)
        blocks = f.size("blocks")
        sides = f.objects("sides")
        if len(sides) != 2:
            raise problem(f.at("sides"), "2 sides (heads, vs_heads)", f"{len(sides)} sides")
        return cls(
            dict(f.object("setup").data),
            blocks,
            [CouplingSide.from_dict(side, blocks) for side in sides],
            f.number("talking_heads"),
        )

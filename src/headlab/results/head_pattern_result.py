"""One head's attention over one text at any length, without its (q_pos, k_pos) weights whole
(``headlab.heads.one_head_pattern`` measures it): the ``head-pattern`` results type.

Two zoom levels:

    overview  (q_cell, k_cell) float32: the mean weight a query of each cell of ``cell``
              positions puts on each cell of keys, summed over the cell's keys (each row sums
              to one); at most ``OVERVIEW_CELLS`` cells a side. The streaming sums' blocked map
              (``attention.streaming_sums``, ``block = cell``): exact at ``cell = 1``.
    tiles     exact float32 weights of ``tile`` x ``tile`` blocks (query rows, key columns) at
              tile-aligned positions, chosen when the pattern is measured: every tile with any
              weight while they fit in ``budget`` bytes, else the tiles holding the most
              attention (the overview says where it is) until the budget is spent.

Arrays travel as base64 of little-endian float32 (the page decodes them as they are); ``numbers``
gives them back as NumPy arrays.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from headlab.results.schema import Fields, problem

OVERVIEW_CELLS = 256  # the overview's most cells a side
TILE = 256  # positions a side of an exact tile: the block a reader zooms into
#: Bytes of exact tiles one pattern keeps (as base64, what the page carries): 16 MiB, about 47
#: tiles of 256 x 256 float32, within the 20 MB a display may take with its overview and tokens.
TILE_BUDGET = 16 * 2**20


def encode_floats(values: np.ndarray) -> str:
    """float32 little-endian, base64 (what the page's ``Float32Array`` reads)."""
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f4").tobytes()).decode("ascii")


def decode_floats(text: str, shape: tuple[int, ...], where: str) -> np.ndarray:
    """The inverse of ``encode_floats``; ValueError naming ``where`` unless it holds ``shape``."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as error:
        raise problem(where, "base64 of float32 values", text) from error
    count = int(np.prod(shape))
    if len(raw) != 4 * count:
        raise problem(where, f"{count} float32 values {shape}", f"{len(raw) // 4} values")
    values = np.frombuffer(raw, dtype="<f4").reshape(shape)
    if not np.isfinite(values).all():
        raise problem(where, "finite numbers", "a NaN or an infinity")
    return values


def tile_bytes(tile: int) -> int:
    """Bytes one tile of tile x tile float32 weights takes as base64."""
    return 4 * -(-(tile * tile * 4) // 3)


@dataclass(frozen=True)
class PatternTile:
    """Exact weights of queries q0 .. q0 + rows - 1 on keys k0 .. k0 + cols - 1 (base64)."""

    q0: int
    k0: int
    rows: int
    cols: int
    data: str


@dataclass(frozen=True, repr=False)
class HeadPattern:
    """``model``'s ``layer``, ``head`` on ``tokens`` (see the module docstring). ``mass``: the
    share of the head's attention (summed over every query) inside the kept tiles;
    ``total_tokens`` > len(tokens) when the text was cut (``cut_reason`` says why)."""

    KIND: ClassVar[str] = "head-pattern"

    model: str
    layer: int
    head: int
    tokens: list[str]
    cell: int
    overview: str
    tile: int
    tiles: list[PatternTile] = field(default_factory=list)
    budget: int = TILE_BUDGET
    mass: float = 1.0
    total_tokens: int = 0
    cut_reason: str = ""

    @property
    def cells(self) -> int:
        return -(-len(self.tokens) // self.cell)

    def overview_weights(self) -> np.ndarray:
        """(q_cell, k_cell) float32, the overview."""
        return decode_floats(self.overview, (self.cells, self.cells), "overview")

    def tile_weights(self, q0: int, k0: int) -> np.ndarray | None:
        """(rows, cols) exact weights of the tile at (q0, k0), or None when it was not kept."""
        for t in self.tiles:
            if (t.q0, t.k0) == (q0, k0):
                return decode_floats(t.data, (t.rows, t.cols), f"tile ({q0}, {k0})")
        return None

    def __repr__(self) -> str:
        n = len(self.tokens)
        return (
            f"HeadPattern({self.model!r}, layer {self.layer}, head {self.head}: {n} tokens, "
            f"overview {self.cells}x{self.cells} cells of {self.cell}, {len(self.tiles)} "
            f"exact {self.tile}x{self.tile} tiles holding {self.mass:.1%} of the attention)"
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model, "layer": self.layer, "head": self.head, "tokens": self.tokens,
            "cell": self.cell, "overview": self.overview, "tile": self.tile,
            "tiles": [vars(t) for t in self.tiles], "budget": self.budget, "mass": self.mass,
            "total_tokens": max(self.total_tokens, len(self.tokens)),
            "cut_reason": self.cut_reason,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict, where: str = KIND) -> HeadPattern:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        tokens = f.strings("tokens", nonempty=True)
        n = len(tokens)
        cell, tile = f.int("cell", 1, n), f.int("tile", 1)
        cells = -(-n // cell)
        overview = f.text("overview")
        decode_floats(overview, (cells, cells), f.at("overview"))
        tiles = []
        for t in f.objects("tiles"):
            q0, k0 = t.int("q0", 0, n - 1), t.int("k0", 0, n - 1)
            rows, cols = t.int("rows", 1, min(tile, n - q0)), t.int("cols", 1, min(tile, n - k0))
            if q0 % tile or k0 % tile:
                raise problem(t.at("q0"), f"tile-aligned positions (multiples of {tile})", [q0, k0])
            decode_floats(t.text("data"), (rows, cols), t.at("data"))
            tiles.append(PatternTile(q0, k0, rows, cols, t.text("data")))
        return cls(f.str("model"), f.int("layer"), f.int("head"), tokens, cell, overview, tile,
                   tiles, f.int("budget"), f.number("mass", 0.0, 1.0 + 1e-6),
                   f.int("total_tokens", n), f.str("cut_reason"))  # fmt: skip

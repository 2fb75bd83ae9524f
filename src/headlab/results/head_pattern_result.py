"""One head's attention over one text at any length, without its (q_pos, k_pos) weights whole
(``headlab.heads.one_head_pattern`` measures it): the ``head-pattern`` results type.

Two zoom levels:

    overview  (q_cell, k_cell) float32: the mean weight a query of each cell of ``cell``
              positions puts on each cell of keys, summed over the cell's keys (each row sums
              to one); at most ``OVERVIEW_CELLS`` cells a side. The streaming sums' blocked map
              (``attention.streaming_sums``, ``block = cell``): exact at ``cell = 1``.
    weights   the head's own float32 weights, unrounded, of every (q_pos, k_pos) whose weight is
              at least ``floor``, kept in ``tile`` x ``tile`` tiles (query rows, key columns) at
              tile-aligned positions. ``floor`` is the smallest value that lets every such
              weight fit in ``budget`` bytes, each counted at its sparse cost
              (``ENTRY_BYTES``; 0: every weight is there). So in any block a
              reader zooms into, every weight >= ``floor`` is shown exactly, and any other is
              known to be below ``floor`` (or exactly 0: above the diagonal when ``causal``,
              everywhere outside the tiles when ``floor`` is 0). A tile is ``dense`` (every
              weight of it, in rows) or sparse (``offsets``: row * cols + col of each weight
              kept, uint16, ascending), whichever is smaller; tiles a reader asks for
              (``focus``) are dense whatever their weights.

Arrays travel as base64 of little-endian float32 and uint16 (the page decodes them as they are);
``tile_weights`` gives a tile back as a NumPy array, NaN where a weight is below ``floor``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from headlab.results.schema import Fields, problem

OVERVIEW_CELLS = 256  # the overview's most cells a side
TILE = 256  # positions a side of an exact tile: the block a reader zooms into
#: Bytes of exact weights one pattern keeps (as base64, what the page carries): 16 MiB, about
#: 2.1 million weights with their offsets (47 dense tiles of 256 x 256), within the 20 MB a
#: display may take with its overview and tokens.
TILE_BUDGET = 16 * 2**20
#: Bytes a kept weight costs at most: float32 value and uint16 offset, as base64.
ENTRY_BYTES = 8
#: Bytes of JSON around one tile (its keys and positions), counted against the budget.
TILE_OVERHEAD = 100


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


def encode_offsets(values: np.ndarray) -> str:
    """uint16 little-endian, base64 (what the page's ``Uint16Array`` reads)."""
    return base64.b64encode(np.ascontiguousarray(values, dtype="<u2").tobytes()).decode("ascii")


def b64_bytes(raw: int) -> int:
    """Bytes of base64 for ``raw`` bytes."""
    return 4 * -(-raw // 3)


def tile_bytes(tile: int) -> int:
    """Bytes one dense tile of tile x tile float32 weights takes, as base64 and its JSON."""
    return b64_bytes(tile * tile * 4) + TILE_OVERHEAD


@dataclass(frozen=True)
class PatternTile:
    """Exact weights of queries q0 .. q0 + rows - 1 on keys k0 .. k0 + cols - 1: ``data``, base64
    float32, every weight in rows when ``offsets`` is empty, else the weights at ``offsets``
    (base64 uint16 of row * cols + col, ascending)."""

    q0: int
    k0: int
    rows: int
    cols: int
    data: str
    offsets: str = ""

    @property
    def kept(self) -> int:
        """How many weights the tile holds."""
        return len(base64.b64decode(self.data)) // 4


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
    floor: float = 0.0
    causal: bool = False

    @property
    def cells(self) -> int:
        return -(-len(self.tokens) // self.cell)

    def overview_weights(self) -> np.ndarray:
        """(q_cell, k_cell) float32, the overview."""
        return decode_floats(self.overview, (self.cells, self.cells), "overview")

    def tile_weights(self, q0: int, k0: int) -> np.ndarray | None:
        """(rows, cols) exact weights of the tile at (q0, k0), NaN where a weight was below
        ``floor``; None when the tile holds no weight at or above ``floor``."""
        for t in self.tiles:
            if (t.q0, t.k0) == (q0, k0):
                return _tile_array(t, f"tile ({q0}, {k0})")
        return None

    @property
    def kept(self) -> int:
        """How many exact weights the pattern holds."""
        return sum(t.kept for t in self.tiles)

    def __repr__(self) -> str:
        n = len(self.tokens)
        which = "every weight" if self.floor == 0 else f"every weight >= {self.floor:.3g}"
        return (
            f"HeadPattern({self.model!r}, layer {self.layer}, head {self.head}: {n} tokens, "
            f"overview {self.cells}x{self.cells} cells of {self.cell}, {self.kept:,} exact "
            f"weights ({which}) holding {self.mass:.1%} of the attention)"
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "layer": self.layer,
            "head": self.head,
            "tokens": self.tokens,
            "cell": self.cell,
            "overview": self.overview,
            "tile": self.tile,
            "tiles": [vars(t) for t in self.tiles],
            "budget": self.budget,
            "mass": self.mass,
            "total_tokens": max(self.total_tokens, len(self.tokens)),
            "cut_reason": self.cut_reason,
            "floor": self.floor,
            "causal": self.causal,
        }

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
            offsets = t.text("offsets") if "offsets" in t.data else ""
            read = PatternTile(q0, k0, rows, cols, t.text("data"), offsets)
            _tile_array(read, t.at("data"))
            tiles.append(read)
        floor = f.number("floor", 0.0) if "floor" in data else 0.0
        causal = f.bool("causal") if "causal" in data else False
        return cls(
            f.str("model"),
            f.int("layer"),
            f.int("head"),
            tokens,
            cell,
            overview,
            tile,
            tiles,
            f.int("budget"),
            f.number("mass", 0.0, 1.0 + 1e-6),
            f.int("total_tokens", n),
            f.str("cut_reason"),
            floor,
            causal,
        )


def _tile_array(t: PatternTile, where: str) -> np.ndarray:
    """(rows, cols) float32 of a tile, NaN where it holds no weight; ValueError naming ``where``
    for data or offsets off their shape (offsets out of the tile or not ascending)."""
    if not t.offsets:
        return decode_floats(t.data, (t.rows, t.cols), where).copy()
    try:
        raw = base64.b64decode(t.offsets, validate=True)
    except (ValueError, TypeError) as error:
        raise problem(where, "base64 of uint16 offsets", t.offsets) from error
    offsets = np.frombuffer(raw[: len(raw) - len(raw) % 2], dtype="<u2")
    if len(raw) % 2 or (
        len(offsets)
        and (offsets[-1] >= t.rows * t.cols or (np.diff(offsets.astype(np.int64)) <= 0).any())
    ):
        expected = f"ascending offsets below {t.rows * t.cols}"
        raise problem(where, expected, f"{len(offsets)} offsets")
    values = decode_floats(t.data, (len(offsets),), where)
    out = np.full(t.rows * t.cols, np.nan, dtype=np.float32)
    out[offsets] = values
    return out.reshape(t.rows, t.cols)

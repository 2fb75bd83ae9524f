"""Where each head's attention goes along one long text, small enough to keep and to draw.

From the sums of one streaming pass (``headlab.attention.statistics``):

    blocked    (layer, head, q_block, k_block): the mean weight a query of each block of
               ``block`` positions puts on each block of keys (its rows sum to one, or less
               for a model with sink logits); at most ``MAX_BLOCKS`` blocks a side
    received   (layer, head, bin): the attention each key receives, summed over the queries and
               over the keys of each bin of ``bin`` positions (at most ``MAX_BINS`` bins): the
               heavy-hitter profile along the whole text
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.results.schema import Fields, is_number, problem

# Blocks a side of a blocked map: 8192 tokens in blocks of 128, 4096 and fewer in blocks of 64.
# At 8192 tokens and 270 heads (SmolLM2) the results file weighs about 17 MB and the report's
# explorer 3.4 MB; 64-token blocks there (128 a side) would weigh 61 MB and 12 MB.
MAX_BLOCKS = 64
MAX_BINS = 512  # bins of a received profile


def block_size(n_tokens: int) -> int:
    """Positions per block so that a text of ``n_tokens`` has at most MAX_BLOCKS blocks."""
    return max(1, -(-n_tokens // MAX_BLOCKS))


@dataclass(frozen=True)
class AttentionMaps:
    """``blocked`` and ``received`` as in the module docstring, nested lists (layer, head, ..)."""

    block: int
    blocked: list[list[list[list[float]]]]
    bin: int
    received: list[list[list[float]]]

    @classmethod
    def from_sums(cls, blocks: Tensor, rows: Tensor, received: Tensor, block: int) -> AttentionMaps:
        """blocks (layer, head, q_blocks, k_blocks) mass sums and rows (q_blocks,) counted
        queries; received (layer, head, k_pos) summed weights."""
        blocked = blocks / rows.clamp_min(1)[None, None, :, None]
        k_pos = received.shape[-1]
        bin_ = max(1, -(-k_pos // MAX_BINS))
        padded = torch.nn.functional.pad(received, (0, -(-k_pos // bin_) * bin_ - k_pos))
        binned = padded.view(*received.shape[:2], -1, bin_).sum(-1)
        return cls(block, _rounded(blocked), bin_, _rounded(binned))

    def to_dict(self) -> dict:
        return {"block": self.block, "blocked": self.blocked, "bin": self.bin,
                "received": self.received}  # fmt: skip

    @classmethod
    def from_dict(cls, f: Fields, layers: int, heads: int) -> AttentionMaps:
        """ValueError naming the field unless both are layers x heads of finite numbers."""
        blocked = _nested(f, "blocked", layers, heads, depth=2)
        received = _nested(f, "received", layers, heads, depth=1)
        return cls(f.int("block", 1), blocked, f.int("bin", 1), received)


    def check_length(self, n_tokens: int, where: str) -> None:
        """ValueError naming the field unless the maps hold what a text of ``n_tokens`` tokens
        gives: ceil(n_tokens / block) blocks a side, ceil(n_tokens / bin) bins. A size in a
        results file is checked against what the file holds (a hand-edited ``n_tokens`` of
        10**12 would make the report allocate for it)."""
        blocks, bins = -(-n_tokens // self.block), -(-n_tokens // self.bin)
        for i, row in enumerate(self.blocked):
            for j, cell in enumerate(row):
                if len(cell) != blocks or any(len(line) != blocks for line in cell):
                    expected = f"{blocks} x {blocks} blocks (context.n_tokens {n_tokens})"
                    raise problem(f"{where}.blocked[{i}][{j}]", expected, len(cell))
        for i, row in enumerate(self.received):
            for j, cell in enumerate(row):
                if len(cell) != bins:
                    expected = f"{bins} bins (context.n_tokens {n_tokens})"
                    raise problem(f"{where}.received[{i}][{j}]", expected, len(cell))


def _rounded(t: Tensor) -> list:
    """``t`` as nested lists of floats with 4 significant digits (what a figure can show)."""

    def cut(value: list | float) -> list | float:
        return [cut(v) for v in value] if isinstance(value, list) else float(f"{value:.4g}")

    return cut(t.double().tolist())


def _nested(f: Fields, key: str, layers: int, heads: int, *, depth: int) -> list:
    value = f.data.get(key)
    where = f.at(key)
    if not (isinstance(value, list) and len(value) == layers):
        raise problem(where, f"{layers} lists (layer)", value)
    for i, row in enumerate(value):
        if not (isinstance(row, list) and len(row) <= heads):
            raise problem(f"{where}[{i}]", f"at most {heads} lists (head)", row)
        for j, cell in enumerate(row):
            _numbers(cell, f"{where}[{i}][{j}]", depth)
    return value


def _numbers(value: object, where: str, depth: int) -> None:
    if not isinstance(value, list):
        raise problem(where, "a list", value)
    for k, item in enumerate(value):
        if depth > 1:
            _numbers(item, f"{where}[{k}]", depth - 1)
        elif not is_number(item):
            raise problem(f"{where}[{k}]", "a finite number", item)

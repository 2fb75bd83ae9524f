"""One row of ``headlab.analysis.params.parameter_table``: a head configuration and what it costs
(``headlab params`` prints them; ``--json`` writes ``to_dict``; ``from_dict`` reads it back)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from headlab.results.schema import Fields, problem


@dataclass(frozen=True)
class ParamRow:
    """One row of the parameter table: a head configuration and what it costs."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    q_proj: int
    kv_proj: int
    out_proj: int
    total: int
    saved_vs_full_mha: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> ParamRow:
        """ValueError naming the field unless every count is an integer >= 0 (the sizes >= 1),
        the parts add up to the total and the K/V heads divide the heads."""
        sizes = {name: f.size(name) for name in ("num_heads", "num_kv_heads", "head_dim")}
        counts = {name.name: f.int(name.name) for name in fields(cls) if name.name not in sizes}
        if sizes["num_heads"] % sizes["num_kv_heads"]:
            raise problem(
                f.at("num_kv_heads"),
                f"a divisor of {sizes['num_heads']} heads",
                sizes["num_kv_heads"],
            )
        parts = counts["q_proj"] + counts["kv_proj"] + counts["out_proj"]
        if parts != counts["total"]:
            raise problem(f.at("total"), f"q_proj + kv_proj + out_proj = {parts}", counts["total"])
        return cls(**sizes, **counts)

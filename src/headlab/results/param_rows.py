"""One row of ``headlab.analysis.params.parameter_table``: a head configuration and what it costs
(``headlab params`` prints them; ``--json`` writes ``to_dict``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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

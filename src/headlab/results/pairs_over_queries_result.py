"""The result of ``headlab why-attends --all-queries``: one head's pair matrix summed over every
query of a text, each query at the key it attends.

``PairsOverQueriesResult`` (KIND "pairs-over-queries"): for head ``head`` of layer ``layer`` (K/V
group ``kv_group``) of ``model`` on the text ``tokens`` (what it was: ``text``), the matrix

    matrix[a, b] = sum over queries i of scale * q_i^a . k_{key[i]}^b

over query-side components a and key-side components b (``components``: the layer's writers,
then the q/k maps' constant "qk-bias"), with the norms held at the run's scales. It keeps:

- ``query_marginal`` and ``key_marginal``: the matrix's row sums and column sums, one value per
  component (each list sums to the total, the sum of ``raw``);
- ``pair_rows`` x ``pair_cols`` and ``pair``: the matrix on the components of largest marginal
  on each side, with a last row and column "rest" for all the others (it still sums to the
  total);
- ``strongest``: the matrix's largest cells by size, [query-side component, key-side component,
  value], largest first;
- ``keys`` and ``raw``: per query position, the key it attends (its highest causal score) and
  its raw score there (scale q . k).

Plain data; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlab.results.schema import MAX_NAME, Fields, is_int, is_number, is_short_text, problem

FROZEN = "norm scales held at the run's values (one per position)"


@dataclass(frozen=True, repr=False)
class PairsOverQueriesResult:
    """See the module docstring."""

    KIND = "pairs-over-queries"

    model: str
    layer: int
    head: int
    kv_group: int
    text: str
    tokens: list[str]
    components: list[str]
    scale: float
    query_marginal: list[float]
    key_marginal: list[float]
    pair_rows: list[str]
    pair_cols: list[str]
    pair: list[list[float]]
    strongest: list[tuple[str, str, float]]
    keys: list[int]
    raw: list[float]
    frozen: str = FROZEN

    @property
    def total(self) -> float:
        """The matrix's sum: the queries' raw scores summed."""
        return sum(self.raw)

    @property
    def at_first(self) -> int:
        """Queries whose attended key is the first position."""
        return sum(k == 0 for k in self.keys)

    @property
    def at_themselves(self) -> int:
        """Queries whose attended key is their own position."""
        return sum(k == i for i, k in enumerate(self.keys))

    def __repr__(self) -> str:
        return (
            f"PairsOverQueriesResult({self.model!r}, head {self.layer}.{self.head}: "
            f"{len(self.keys)} queries at their attended keys, {len(self.components)} "
            f"components, total {self.total:.4g})"
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "layer": self.layer,
            "head": self.head,
            "kv_group": self.kv_group,
            "text": self.text,
            "tokens": list(self.tokens),
            "components": list(self.components),
            "scale": self.scale,
            "query_marginal": list(self.query_marginal),
            "key_marginal": list(self.key_marginal),
            "pair_rows": list(self.pair_rows),
            "pair_cols": list(self.pair_cols),
            "pair": [list(r) for r in self.pair],
            "strongest": [[a, b, v] for a, b, v in self.strongest],
            "keys": list(self.keys),
            "raw": list(self.raw),
            "frozen": self.frozen,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = KIND) -> PairsOverQueriesResult:
        fields = Fields(data, where)
        components = fields.strings("components", nonempty=True)
        marginals = {name: fields.numbers(name) for name in ("query_marginal", "key_marginal")}
        for name, values in marginals.items():
            if len(values) != len(components):
                raise problem(
                    fields.at(name), f"{len(components)} numbers (one per component)", values
                )
        tokens = fields.strings("tokens", nonempty=True)
        keys, raw = fields.list("keys"), fields.numbers("raw")
        for name, values in (("keys", keys), ("raw", raw)):
            if len(values) != len(tokens):
                raise problem(fields.at(name), f"{len(tokens)} values (one per token)", values)
        for i, key in enumerate(keys):
            if not (is_int(key) and 0 <= key <= i):
                raise problem(f"{fields.at('keys')}[{i}]", f"a key position in 0..{i}", key)
        rows, cols = fields.strings("pair_rows"), fields.strings("pair_cols")
        pair = fields.grid("pair", len(rows), len(cols))
        if any(len(row) != len(cols) for row in pair):
            raise problem(fields.at("pair"), f"{len(rows)} x {len(cols)} numbers", data["pair"])
        known = set(components)
        strongest = []
        for i, cell in enumerate(fields.list("strongest")):
            where_cell = f"{fields.at('strongest')}[{i}]"
            if not (isinstance(cell, list) and len(cell) == 3):
                raise problem(where_cell, "[component, component, value]", cell)
            for j in (0, 1):
                if not is_short_text(cell[j]):
                    got = f"{len(cell[j])} characters" if isinstance(cell[j], str) else cell[j]
                    raise problem(
                        f"{where_cell}[{j}]", f"a string of at most {MAX_NAME} characters", got
                    )
                if cell[j] not in known:
                    raise problem(f"{where_cell}[{j}]", "one of the components", cell[j])
            if not is_number(cell[2]):
                raise problem(f"{where_cell}[2]", "a finite number", cell[2])
            strongest.append((cell[0], cell[1], float(cell[2])))
        return cls(
            model=fields.name("model"),
            layer=fields.int("layer"),
            head=fields.int("head"),
            kv_group=fields.int("kv_group"),
            text=fields.text("text"),
            tokens=tokens,
            components=components,
            scale=fields.number("scale"),
            pair_rows=rows,
            pair_cols=cols,
            pair=pair,
            strongest=strongest,
            keys=[int(k) for k in keys],
            raw=raw,
            frozen=fields.str("frozen"),
            **marginals,
        )


__all__ = ["PairsOverQueriesResult"]

"""Results of ``headlab.circuits`` edge methods: scores per edge, their agreement, faithfulness.

``EdgeScores`` (KIND "circuit-edges"): one score per edge (graph names such as
``16.0->18.g2<k>``) from exact path patching or an attribution, with the metric on the clean
and corrupted runs. ``Agreement``: an attribution's Spearman, Pearson and top-k overlap against
a reference scoring. ``FaithfulnessCurve`` (KIND "circuit-faithfulness"): faithfulness of the
top-n (or greedy) circuits and of random circuits over fractions of the edges, with MIB's
areas. Plain data: ``to_dict`` and a validating ``from_dict``; no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from headlab.results.schema import Fields, is_int, problem

EDGE_METHODS = (
    "path-patching",
    "eap",
    "eap-ig",
    "eap-ig-activations",
    "eap-ig-senders",
    "composition",
)
#: Spellings of earlier results files, read as today's (``circuits --method`` names them so).
OLD_SPELLINGS = {"path_patching": "path-patching"}


def method_name(method: str) -> str:
    """``method`` as ``circuits --method`` spells it ("path_patching" -> "path-patching")."""
    return OLD_SPELLINGS.get(method, method)


@dataclass(frozen=True)
class EdgeScores:
    """``method`` ("path-patching", an attribution (``circuits.attribution.METHODS``), or
    "composition": weight-based scores of the head-to-head edges, ``circuits.run``), the
    ``metric`` kind, ``edges`` and their
    ``scores`` (the change in the metric when the edge is patched, or its attribution), the
    metric on the clean and the corrupted runs."""

    KIND = "circuit-edges"

    method: str
    metric: str
    edges: list[str]
    scores: list[float]
    clean_metric: float
    corrupted_metric: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", method_name(self.method))
        if len(self.edges) != len(self.scores):
            raise ValueError(
                f"edges and scores must have one length, got {len(self.edges)} and "
                f"{len(self.scores)}"
            )

    def __repr__(self) -> str:
        return f"EdgeScores({self.method}, {self.metric}: {len(self.edges)} edges)"

    def top(self, n: int) -> list[tuple[str, float]]:
        """The ``n`` edges of largest |score|, largest first (ties in the edges' order)."""
        order = sorted(range(len(self.edges)), key=lambda i: (-abs(self.scores[i]), i))
        return [(self.edges[i], self.scores[i]) for i in order[:n]]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "circuit-edges") -> EdgeScores:
        fields = Fields(data, where)
        method = method_name(fields.str("method"))
        if method not in EDGE_METHODS:
            raise problem(fields.at("method"), f"one of {', '.join(EDGE_METHODS)}", method)
        edges, scores = fields.strings("edges"), fields.numbers("scores")
        if len(edges) != len(scores):
            raise problem(fields.at("scores"), f"{len(edges)} numbers (one per edge)", scores)
        return cls(
            method,
            fields.str("metric"),
            edges,
            scores,
            fields.number("clean_metric"),
            fields.number("corrupted_metric"),
        )


@dataclass(frozen=True)
class Agreement:
    """How ``method``'s scores agree with ``reference``'s on ``edges`` shared edges: Spearman
    and Pearson correlations, and ``top_k_shared`` of the ``k`` largest |scores|."""

    reference: str
    method: str
    edges: int
    spearman: float
    pearson: float
    k: int
    top_k_shared: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "circuit-agreement") -> Agreement:
        fields = Fields(data, where)
        return cls(
            method_name(fields.str("reference")),
            method_name(fields.str("method")),
            fields.int("edges", 2),
            fields.number("spearman", -1.0, 1.0),
            fields.number("pearson", -1.0, 1.0),
            fields.int("k", 1),
            fields.int("top_k_shared"),
        )


@dataclass(frozen=True)
class FaithfulnessCurve:
    """Faithfulness of the circuits of ``sizes`` edges (``fractions`` of the model's ``edges``)
    chosen from ``method``'s scores by ``selection`` ("top" or "greedy"), and of random
    circuits of the same sizes (``random[i][seed]``), with MIB's areas: ``cpr`` (area under f)
    and ``cmd`` (area under |1 - f|), and the same for each seed's random circuits."""

    KIND = "circuit-faithfulness"

    method: str
    selection: str
    metric: str
    edges: int
    fractions: list[float]
    sizes: list[int]
    faithfulness: list[float]
    random: list[list[float]]
    cpr: float
    cmd: float
    random_cpr: list[float]
    random_cmd: list[float]

    def __repr__(self) -> str:
        return (
            f"FaithfulnessCurve({self.selection} {self.method}, {len(self.sizes)} sizes of "
            f"{self.edges} edges: CPR {self.cpr:.3f}, CMD {self.cmd:.3f})"
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "circuit-faithfulness") -> FaithfulnessCurve:
        fields = Fields(data, where)
        selection = fields.str("selection")
        if selection not in ("top", "greedy"):
            raise problem(fields.at("selection"), "one of top, greedy", selection)
        fractions = fields.numbers("fractions")
        sizes = fields.list("sizes")
        for i, size in enumerate(sizes):
            if not is_int(size) or size < 1:
                raise problem(f"{fields.at('sizes')}[{i}]", "an integer >= 1", size)
        edges = fields.int("edges", 1)
        for i, size in enumerate(sizes):
            if size > edges:
                raise problem(
                    f"{fields.at('sizes')}[{i}]", f"an integer <= {edges} (its edges)", size
                )
        faithfulness = fields.numbers("faithfulness")
        random = fields.grid("random")
        for key, got in (("sizes", sizes), ("faithfulness", faithfulness), ("random", random)):
            if len(got) != len(fractions):
                raise problem(fields.at(key), f"{len(fractions)} entries (one per fraction)", got)
        return cls(
            method=method_name(fields.str("method")),
            selection=selection,
            metric=fields.str("metric"),
            edges=edges,
            fractions=fractions,
            sizes=sizes,
            faithfulness=faithfulness,
            random=random,
            cpr=fields.number("cpr"),
            cmd=fields.number("cmd"),
            random_cpr=fields.numbers("random_cpr"),
            random_cmd=fields.numbers("random_cmd"),
        )

"""The ``model-corpus-roles`` results file: head statistics and roles summed over many documents,
and the per-document sums every row of ``model_roles.jsonl`` holds (``headlab.heads.corpus_sums``
measures and merges them; ``headlab.experiments.corpus_roles`` runs the documents).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from headlab.limits import check_int
from headlab.results.head_roles import MIN_MATCH, SINKS, WINDOW, HeadRoles
from headlab.results.head_statistics import HeadStatistics
from headlab.results.schema import Fields, is_int, problem
from headlab.results.summary_repr import summarised

ROLE_SUMS = ("window_error", "copy_weight")  # summed beside the statistics, not statistics


@dataclass(frozen=True)
class RoleRequest:
    """What every document's pass measures: each document cut to ``max_tokens`` (None: the
    model's context); window errors for ``sinks`` first keys plus a recent ``window``; copy
    positions after ``min_match`` matching tokens (``heads.repeats``)."""

    max_tokens: int | None = None
    sinks: int = SINKS
    window: int = WINDOW
    min_match: int = MIN_MATCH

    def check(self, *, name: str = "max_tokens", fits: bool = True) -> RoleRequest:
        """ValueError naming the option out of range (the model's limit is checked per pass):
        the one check of a window of ``sinks`` + ``window`` keys on texts of ``max_tokens``
        (called ``name`` by its caller), which must be longer than the window when ``fits``."""
        if self.max_tokens is not None:
            check_int(name, self.max_tokens, low=2)
        check_int("sinks", self.sinks, low=0)
        check_int("window", self.window)
        check_int("min_match", self.min_match)
        if fits and self.max_tokens is not None and self.max_tokens <= self.sinks + self.window:
            raise ValueError(
                f"{name}={self.max_tokens} is not longer than sinks {self.sinks} + window "
                f"{self.window}: every key would be in the window"
            )
        return self

    def tokens_for(self, max_positions: int, *, name: str = "max_tokens") -> int:
        """Tokens of each text on a model of ``max_positions`` positions: ``max_tokens``, or
        all of them; ValueError naming ``name`` when it asks for more."""
        limit = max_positions if self.max_tokens is None else self.max_tokens
        return check_int(name, limit, low=2, high=max_positions)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> RoleRequest:
        tokens = f.data.get("max_tokens")
        if tokens is not None:
            tokens = f.int("max_tokens", 2)
        return cls(tokens, f.int("sinks", 0), f.int("window", 1), f.int("min_match", 1))


@dataclass(frozen=True)
class DocumentSums:
    """The sums of one document, or of several merged (see the module docstring).

    model: the model's name; first_token: its first-token statistic; kv_heads_per_layer: its K/V
    heads (the role groups); predicts: its objective is the next token (retrieval needs it).
    documents: how many documents are summed; truncated: how many were cut to max_tokens;
    text_tokens: their tokens before the cut. sums: name -> (layer, head) float sums, the
    statistics first in table order, then ``window_error`` (absent when no document has one)
    and ``copy_weight``; retrieval_hits: (layer, head) counts.
    """

    model: str
    first_token: str
    kv_heads_per_layer: list[int]
    predicts: bool
    documents: int
    truncated: int
    text_tokens: int
    n_queries: int
    n_prev: int
    n_window: int
    n_copy: int
    n_correct: int
    sums: dict[str, list[list[float]]]
    retrieval_hits: list[list[int]]

    @property
    def statistic_names(self) -> tuple[str, ...]:
        return tuple(name for name in self.sums if name not in ROLE_SUMS)

    def tokens_for(self, max_positions: int, *, name: str = "max_tokens") -> int:
        """Tokens of each text on a model of ``max_positions`` positions: ``max_tokens``, or
        all of them; ValueError naming ``name`` when it asks for more."""
        limit = max_positions if self.max_tokens is None else self.max_tokens
        return check_int(name, limit, low=2, high=max_positions)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, where: str = "sums") -> DocumentSums:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        hits = f.get("retrieval_hits", "rows of integers >= 0 (layer x head)", _count_grid)
        layers, heads = len(hits), max((len(row) for row in hits), default=0)
        group = f.object("sums")
        sums = {str(name): group.grid(name, layers, heads) for name in group.data}
        for name, grid in sums.items():
            if [len(row) for row in grid] != [len(row) for row in hits]:
                raise problem(group.at(name), "the heads of retrieval_hits in each layer", grid)
        kv = f.get(
            "kv_heads_per_layer",
            f"{layers} integers >= 1",
            lambda v: (
                isinstance(v, list) and len(v) == layers and all(is_int(n) and n >= 1 for n in v)
            ),
        )
        first = f.str("first_token")
        if first not in sums:
            raise problem(f.at("first_token"), "one of the names in sums", first)
        return cls(
            model=f.name("model"),
            first_token=first,
            kv_heads_per_layer=list(kv),
            predicts=f.bool("predicts"),
            documents=f.int("documents", 1),
            truncated=f.int("truncated"),
            text_tokens=f.int("text_tokens"),
            n_queries=f.int("n_queries"),
            n_prev=f.int("n_prev"),
            n_window=f.int("n_window"),
            n_copy=f.int("n_copy"),
            n_correct=f.int("n_correct"),
            sums=sums,
            retrieval_hits=hits,
        )


def _count_grid(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(row, list) and all(is_int(v) and v >= 0 for v in row) for row in value
    )


@dataclass(frozen=True)
class CorpusCounts:
    """What the corpus held: documents (``truncated`` of them cut to max_tokens), tokens
    analysed, the tokens of the documents with window errors (``window_tokens``; the others are
    not longer than sinks + window), copy positions and those the model predicted right."""

    documents: int
    truncated: int
    tokens: int
    window_tokens: int
    copy_positions: int
    correct_predictions: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, f: Fields) -> CorpusCounts:
        return cls(
            *(
                f.int(name, 1 if name == "documents" else 0)
                for name in (
                    "documents",
                    "truncated",
                    "tokens",
                    "window_tokens",
                    "copy_positions",
                    "correct_predictions",
                )
            )
        )


@summarised
@dataclass(frozen=True)
class CorpusRolesResult:
    """The results document of many documents: the statistics of ``head_statistics`` (their
    fields at the top level; n_texts = documents), the ``corpus`` counts, the ``options`` every
    document was measured with, and the ``roles`` of every head over the corpus."""

    KIND: ClassVar[str] = "model-corpus-roles"

    statistics: HeadStatistics
    corpus: CorpusCounts
    options: RoleRequest
    roles: HeadRoles

    def to_dict(self) -> dict:
        return {
            **self.statistics.to_dict(),
            "corpus": self.corpus.to_dict(),
            "options": self.options.to_dict(),
            "roles": self.roles.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "model-corpus-roles") -> CorpusRolesResult:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        statistics = HeadStatistics.from_dict(data, where)
        f = Fields(data, where)
        return cls(
            statistics,
            CorpusCounts.from_dict(f.object("corpus")),
            RoleRequest.from_dict(f.object("options")),
            HeadRoles.from_dict(f.object("roles"), statistics.num_layers, statistics.num_heads),
        )


def __getattr__(name: str) -> object:
    """``RoleOptions``, the old name of ``RoleRequest`` (deprecated; docs name the new one)."""
    from headlab.notices import renamed

    return renamed(__name__, name, {"RoleOptions": RoleRequest})
